/**
 * Store GC time for a store of N image versions (default 200), on the fs
 * store and on S3 (s3rver), side by side in one run.
 *
 *   node dist/bench/gc.js [--versions 200] [--remove 100] [--backends fs,s3]
 *
 * The series is an application image pushed version after version to its
 * own tag (`bench/app:v0001`…): a shared base layer (48 files) and an app
 * layer of 24 files where each version rewrites 3 files and adds one, the
 * way a task image's daily versions differ. Then the oldest `--remove` tags
 * are removed and `gc store --grace 0` runs (in process, as the CLI does):
 * a dry run first, then the real one. Reported per backend: objects in the
 * store, seconds, objects listed and marked per second, objects deleted per
 * second, bytes freed, and the dead bytes inside blobs that stay (the
 * figure that decides about compaction: src/format/README.md).
 *
 * Bench-only: may import anything.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildLayerTar, dir, file, largeFile } from '../fixtures/layer-dsl.js'
import { startS3rver } from '../fixtures/s3rver.js'
import { parseRef } from '../src/format/ref.js'
import { gcStore } from '../src/gc/store-gc.js'
import { storeUsage } from '../src/gc/store-df.js'
import { pushSource } from '../src/image/push.js'
import { deleteRef } from '../src/image/refs.js'
import { openImageSource } from '../src/image/sources/open-image-source.js'
import { loadImage } from '../src/image/load-image.js'
import { openNodeDb } from '../src/state/node-db.js'
import type { ObjectStore } from '../src/store/object-store.js'
import { openStore } from '../src/store/open-store.js'
import { fmt, loadAverage, MB, RESULTS_DIR } from './bench-report.js'

/** `--name value` from argv, or the fallback. */
function arg (name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback
}
const versions = Number(arg('versions', '200'))
const remove = Number(arg('remove', String(Math.floor(versions / 2))))
const backends = arg('backends', 'fs,s3').split(',')
const KIB = 1024

interface Row { backend: string, objects: number, storeMB: number, dryRunS: number, gcS: number, objectsPerS: number, deleted: number, deletedPerS: number, freedMB: number, deadMB: number, liveBlobMB: number, overHalfDead: number, pushS: number }

async function fillStore (store: ObjectStore, work: string): Promise<number> {
  const db = openNodeDb(join(work, 'node'))
  const started = performance.now()
  const baseTar = join(work, 'base.tar')
  await writeFile(baseTar, buildLayerTar([dir('usr'), ...Array.from({ length: 48 }, (_, i) => largeFile(`usr/lib${i}.so`, 24 * KIB + i * 997, `base-${i}`))]))
  const base = await openImageSource(baseTar)
  await pushSource(base, parseRef('bench/base:v1'), { store, db, workers: 0 })
  await base.close()
  const baseImage = await loadImage(store, 'bench/base:v1')
  const files = Array.from({ length: 24 }, (_, i) => `app-${i}-v0`)
  for (let v = 0; v < versions; v++) {
    // Each version rewrites three files and adds one (kept small: the app layer is the task's code).
    for (let k = 0; k < 3; k++) files[(v * 3 + k) % files.length] = `app-${(v * 3 + k) % files.length}-v${v}`
    files.push(`extra-${v}`)
    if (files.length > 40) files.splice(24, 1)
    const tar = join(work, `app-${v}.tar`)
    await writeFile(tar, buildLayerTar([dir('app'), ...files.map((seed, i) => largeFile(`app/m${i}.py`, 6 * KIB + (i * 131) % 9000, seed)), file('app/VERSION', `${v}\n`)]))
    const source = await openImageSource(tar)
    await pushSource(source, parseRef(`bench/app:v${String(v).padStart(4, '0')}`), { store, db, workers: 0, onto: { image: baseImage, name: 'bench/base:v1', createdBy: `version ${v}` } })
    await source.close()
    await rm(tar)
    if ((v + 1) % 50 === 0) process.stderr.write(`  pushed ${v + 1} versions\n`)
  }
  db.close()
  return (performance.now() - started) / 1000
}

async function runBackend (backend: string): Promise<Row> {
  const work = await mkdtemp(join(tmpdir(), `layerd-bench-gc-${backend}-`))
  const s3 = backend === 's3' ? await startS3rver(join(work, 's3rver')) : undefined
  try {
    const store = openStore(s3 === undefined ? `file://${join(work, 'store')}` : `s3://${s3.bucket}/gc`, s3 === undefined ? { fs: { fsync: false } } : { s3Endpoint: s3.endpoint })
    process.stderr.write(`${backend}: pushing ${versions} versions\n`)
    const pushS = await fillStore(store, work)
    for (let v = 0; v < remove; v++) await deleteRef(store, parseRef(`bench/app:v${String(v).padStart(4, '0')}`))
    const before = await storeUsage(store)
    const dry = await gcStore(store, { graceMs: 0, dryRun: true })
    const real = await gcStore(store, { graceMs: 0 })
    const after = await storeUsage(store)
    await store.close()
    return {
      backend,
      objects: before.total.objects,
      storeMB: before.total.bytes / MB,
      dryRunS: dry.seconds,
      gcS: real.seconds,
      objectsPerS: before.total.objects / real.seconds,
      deleted: real.deletedObjects,
      deletedPerS: real.deletedObjects / real.seconds,
      freedMB: real.deletedBytes / MB,
      deadMB: after.deadBytesInLiveBlobs / MB,
      liveBlobMB: after.dedup.storedBlobBytes / MB,
      overHalfDead: after.blobsOverHalfDead,
      pushS
    }
  } finally {
    await s3?.stop()
    await rm(work, { recursive: true, force: true })
  }
}

const rows: Row[] = []
const load = loadAverage()
for (const b of backends) rows.push(await runBackend(b))
const lines = [
  `# gc store: ${versions} versions, oldest ${remove} removed, --grace 0 (load average at start: ${load})`,
  '',
  '| backend | objects | store MB | dry run s | gc s | objects/s (listed+marked) | deleted | deleted/s | freed MB | dead MB in kept blobs | kept blob MB | blobs over half dead |',
  '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ...rows.map(r => `| ${r.backend} | ${r.objects} | ${fmt(r.storeMB)} | ${fmt(r.dryRunS)} | ${fmt(r.gcS)} | ${fmt(r.objectsPerS, 0)} | ${r.deleted} | ${fmt(r.deletedPerS, 0)} | ${fmt(r.freedMB)} | ${fmt(r.deadMB, 3)} | ${fmt(r.liveBlobMB)} | ${r.overHalfDead} |`),
  '',
  `Reproduce: node dist/bench/gc.js --versions ${versions} --remove ${remove} --backends ${backends.join(',')}`
]
console.log(lines.join('\n'))
const { mkdir } = await import('node:fs/promises')
await mkdir(RESULTS_DIR, { recursive: true })
await writeFile(join(RESULTS_DIR, 'gc.json'), JSON.stringify({ versions, remove, load, rows }, null, 2))
await writeFile(join(RESULTS_DIR, 'gc.md'), lines.join('\n') + '\n')
