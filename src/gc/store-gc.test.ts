/**
 * Store GC correctness on the fs store and on S3 (s3rver): three python
 * versions and two unrelated images, two refs removed, `layerctl gc store
 * --grace 0` through the real CLI. Every kept ref exports bit-exactly, every
 * object only the removed refs used is gone, and `layerctl df` before and
 * after agrees with what gc deleted.
 */
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { exportDigest, imageClosure, pushPythonV3, writeUnrelatedImage } from '../../fixtures/gc-scenario.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { startS3rver } from '../../fixtures/s3rver.js'
import { compareTrees, snapshotTar, snapshotTree } from '../../fixtures/tree-compare.js'
import { ChunkFetcher } from '../cache/chunk-fetcher.js'
import { MemoryChunkCache } from '../cache/memory-chunk-cache.js'
import { GC_PREFIX, layerByDiffKey, layerKey } from '../format/keys.js'
import { digestHex } from '../format/digest.js'
import { parseRef } from '../format/ref.js'
import { loadImage } from '../image/load-image.js'
import { pushImage } from '../image/push.js'
import { exportImage } from '../materialize/export-image.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import type { ObjectStore } from '../store/object-store.js'
import { openStore } from '../store/open-store.js'

const images = await ensureDebianImages()
const KEPT = ['deb/python:v2', 'deb/python:v3', 'other/two:v1']
const REMOVED = ['deb/python:v1', 'other/one:v1']

async function scenario (t: Test, work: string, storeUrl: string, env: NodeJS.ProcessEnv = {}): Promise<void> {
  const store = openStore(storeUrl, env.LAYERD_S3_ENDPOINT === undefined ? {} : { s3Endpoint: env.LAYERD_S3_ENDPOINT })
  t.teardown(() => store.close())
  const node = layerdNode(join(work, 'node'), { store: storeUrl, env })
  const json = async (...args: string[]): Promise<any> => {
    const r = await node.layerctl(...args, '--json')
    t.equal(r.code, 0, `layerctl ${args.join(' ')}: ${r.stderr}`)
    return JSON.parse(r.stdout)
  }

  const db = openMemoryNodeDb()
  await pushImage(images.images['python-v1'].dockerArchive, parseRef('deb/python:v1'), { store, db })
  await pushImage(images.images['python-v2'].ociLayout, parseRef('deb/python:v2'), { store, db })
  await pushPythonV3(store, db, work, 'deb/python:v2', 'deb/python:v3')
  await pushImage(await writeUnrelatedImage(work, 'one'), parseRef('other/one:v1'), { store, db })
  await pushImage(await writeUnrelatedImage(work, 'two'), parseRef('other/two:v1'), { store, db })

  const closures = new Map<string, Set<string>>()
  for (const ref of [...KEPT, ...REMOVED]) closures.set(ref, await imageClosure(store, ref))
  const keptKeys = new Set(KEPT.flatMap(r => [...closures.get(r)!]))
  const onlyRemoved = new Set(REMOVED.flatMap(r => [...closures.get(r)!]).filter(k => !keptKeys.has(k)))
  // Layers pushed from a tar leave a diff_id hint, which goes with its layer.
  for (const ref of REMOVED) {
    for (const l of (await loadImage(store, ref)).manifest.layers) {
      const hint = layerByDiffKey(digestHex(l.diffId))
      if (!keptKeys.has(layerKey(digestHex(l.digest))) && (await store.stat(hint)) !== undefined) onlyRemoved.add(hint)
    }
  }
  t.ok(onlyRemoved.size > 5, `${onlyRemoved.size} objects are used only by the refs to be removed`)
  for (const k of onlyRemoved) if ((await store.stat(k)) === undefined) t.fail(`${k} should exist before gc`)

  const before = new Map<string, string>()
  for (const ref of KEPT) before.set(ref, await exportDigest(store, ref, work))

  const dfStart = await json('df')
  t.equal(dfStart.store.reclaimable.objects, 0, 'with every ref in place nothing is reclaimable')
  const r = await node.layerctl('rm', ...REMOVED)
  t.equal(r.code, 0, r.stderr)
  const dfBefore = await json('df')
  t.equal(dfBefore.store.total.bytes, dfStart.store.total.bytes - (dfStart.store.byKind.ref.bytes - dfBefore.store.byKind.ref.bytes), 'rm removed only refs')

  const graceful = await json('gc', 'store')
  t.equal(graceful.deletedObjects, 0, 'with the default 1 h grace, objects written minutes ago are kept')
  const dry = await json('gc', 'store', '--grace', '0', '--dry-run')
  t.equal(dry.dryRun, true)
  t.equal((await json('df')).store.total.objects, dfBefore.store.total.objects, 'a dry run deletes nothing')

  const gc = await json('gc', 'store', '--grace', '0')
  t.match(gc, { deletedObjects: Number, deletedBytes: Number, keptObjects: Number, keptBytes: Number, repackedBlobs: 0, seconds: Number })
  t.equal(gc.deletedObjects, dry.deletedObjects, 'the dry run predicted the deletion')
  t.equal(gc.deletedObjects, dfBefore.store.reclaimable.objects, 'gc deleted what df called reclaimable (objects)')
  t.equal(gc.deletedBytes, dfBefore.store.reclaimable.bytes, 'gc deleted what df called reclaimable (bytes)')
  t.equal(gc.deletedObjects, onlyRemoved.size, 'exactly the objects only removed refs used')

  const dfAfter = await json('df')
  t.equal(dfAfter.store.total.bytes, dfBefore.store.total.bytes - gc.deletedBytes, 'df: total bytes fell by what gc deleted')
  t.equal(dfAfter.store.total.objects, dfBefore.store.total.objects - gc.deletedObjects)
  t.equal(dfAfter.store.reclaimable.bytes, 0, 'nothing reclaimable is left')
  t.same(dfAfter.store.live, dfBefore.store.live, 'live bytes unchanged')
  t.equal(gc.keptBytes, dfAfter.store.total.bytes, 'keptBytes is what the store holds now')
  t.equal(gc.keptObjects, dfAfter.store.total.objects)

  for (const k of onlyRemoved) if ((await store.stat(k)) !== undefined) t.fail(`${k} was used only by removed refs and survived gc`)
  for (const k of keptKeys) if ((await store.stat(k)) === undefined) t.fail(`${k} is needed by a kept ref and was deleted`)
  const leftovers: string[] = []
  for await (const k of store.list(GC_PREFIX)) leftovers.push(k)
  t.same(leftovers, [], 'gc leaves no lease, clock or condemned list behind')

  for (const ref of KEPT) t.equal(await exportDigest(store, ref, work), before.get(ref), `${ref} exports bit-exactly after gc`)
  const image = await loadImage(store, 'deb/python:v2')
  const fetcher = new ChunkFetcher(store, new MemoryChunkCache())
  await exportImage(image, fetcher, { tarFile: join(work, 'v2.tar') })
  await fetcher.close()
  t.same(compareTrees(await snapshotTree(images.images['python-v2'].rootfs), await snapshotTar(join(work, 'v2.tar'))), [], 'python v2 still equals its source tree')
  const again = await json('gc', 'store', '--grace', '0')
  t.equal(again.deletedObjects, 0, 'a second gc finds nothing')
}

t.test('gc store --grace 0 on the fs store', async t => {
  const work = t.testdir()
  await scenario(t, work, `file://${join(work, 'store')}`)
})

t.test('gc store --grace 0 on S3 (s3rver)', async t => {
  const work = t.testdir()
  const s3 = await startS3rver(join(work, 's3rver'))
  t.teardown(() => s3.stop())
  await scenario(t, work, `s3://${s3.bucket}/gc`, { LAYERD_S3_ENDPOINT: s3.endpoint })
})

t.test('--keep-history N keeps the newest N versions of a ref; older versions\' own objects go', async t => {
  const work = t.testdir()
  const storeUrl = `file://${join(work, 'store')}`
  const store: ObjectStore = openStore(storeUrl)
  t.teardown(() => store.close())
  const db = openMemoryNodeDb()
  const node = layerdNode(join(work, 'node'), { store: storeUrl })
  const closures: Array<Set<string>> = []
  for (const seed of ['a', 'b', 'c']) {
    await pushImage(await writeUnrelatedImage(work, seed, 1), parseRef('app/x:latest'), { store, db })
    closures.push(await imageClosure(store, 'app/x:latest'))
  }
  const all = JSON.parse((await node.layerctl('gc', 'store', '--grace', '0', '--json')).stdout)
  t.equal(all.deletedObjects, 0, 'by default the whole history is kept')
  const r = await node.layerctl('gc', 'store', '--grace', '0', '--keep-history', '2', '--json')
  t.equal(r.code, 0, r.stderr)
  const kept = new Set([...closures[1]!, ...closures[2]!])
  for (const k of closures[0]!) t.equal((await store.stat(k)) === undefined, !kept.has(k), `${k} of the oldest version`)
  for (const k of kept) t.not(await store.stat(k), undefined)
  const bad = await node.layerctl('gc', 'store', '--keep-history', '0')
  t.equal(bad.code, 2)
  t.match(bad.stderr, /invalid --keep-history "0"/)
  const badGrace = await node.layerctl('gc', 'store', '--grace', 'soon')
  t.equal(badGrace.code, 2)
  t.match(badGrace.stderr, /invalid --grace "soon"/)
  const noSubject = await node.layerctl('gc')
  t.equal(noSubject.code, 2)
  t.match(noSubject.stderr, /gc needs what to collect: store, node or sandboxes/)
})
