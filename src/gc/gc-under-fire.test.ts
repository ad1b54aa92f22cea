/**
 * Store GC under fire: 20 rounds of `gc store --grace 0` race 4 pushers and
 * a reader on a real layerd FUSE mount, on one fs store.
 *
 * Each pusher, per round, pushes a scratch image holding the content its
 * next kept image will share, removes it (so that content becomes garbage a
 * gc condemns), then pushes the kept image, which dedups against exactly
 * that garbage. This is the race a naive gc loses (a push reuses a blob gc
 * is deleting). Afterwards every kept ref must export bit-exactly its source
 * tree, every push must have succeeded, and the mount must have read the
 * right bytes every time.
 */
import t from 'tap'
import { createHash } from 'node:crypto'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { layerdNode, mountsUnder } from '../../fixtures/layerd-harness.js'
import { buildLayerTar, dir, file, largeFile } from '../../fixtures/layer-dsl.js'
import { seededBytes } from '../../fixtures/seeded-bytes.js'
import { compareTrees, snapshotTar } from '../../fixtures/tree-compare.js'
import { ChunkFetcher } from '../cache/chunk-fetcher.js'
import { MemoryChunkCache } from '../cache/memory-chunk-cache.js'
import { parseRef } from '../format/ref.js'
import { loadImage } from '../image/load-image.js'
import { pushImage } from '../image/push.js'
import { deleteRef } from '../image/refs.js'
import { exportImage } from '../materialize/export-image.js'
import { openNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { gcStore, type StoreGcResult } from './store-gc.js'

const KIB = 1024
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))
// Twenty gc rounds racing real pushes take minutes on a busy 2-core machine.
t.setTimeout(15 * 60_000)
const GC_ROUNDS = 20
const PUSHERS = 4
const MOUNT_FILES = 120
const MOUNT_FILE_BYTES = 48 * KIB

t.test('gc under fire: 20 rounds of gc store --grace 0, 4 pushers, a mount that reads', async t => {
  const work = t.testdir()
  const storeUrl = `file://${join(work, 'store')}`
  // The node's home holds the control socket, whose path must stay under 108 bytes.
  const home = await mkdtemp('/tmp/layerd-gcfire-')
  const node = layerdNode(home, { store: storeUrl })
  const store = openStore(storeUrl, { fs: { fsync: false } })
  t.teardown(() => store.close())

  // The mounted image: kept all along, read while gc runs.
  const mountedTar = join(work, 'mounted.tar')
  await writeFile(mountedTar, buildLayerTar([dir('data'), ...Array.from({ length: MOUNT_FILES }, (_, i) => largeFile(`data/f${i}.bin`, MOUNT_FILE_BYTES + i, `mounted-${i}`))]))
  await pushImage(mountedTar, parseRef('fire/mounted:v1'), { store, db: openNodeDb(join(work, 'pusher-m')), workers: 1 })
  const mnt = join(work, 'mnt')
  await mkdir(mnt)
  await node.startDaemon()
  const m = await node.layerctl('mount', 'fire/mounted:v1', mnt)
  t.equal(m.code, 0, m.stderr)
  // In order: unmount, stop the daemon, then remove its home; run at the end of the test too, before
  // tap removes the test's directory, which holds the mountpoint.
  let stopped = false
  const stopAll = async (): Promise<void> => {
    if (stopped) return
    stopped = true
    await node.layerctl('umount', mnt)
    await node.stopDaemon()
    await rm(home, { recursive: true, force: true })
  }
  t.teardown(stopAll)
  const expectedDigest = (i: number): string => createHash('sha256').update(seededBytes(`mounted-${i}`, MOUNT_FILE_BYTES + i)).digest('hex')

  let gcDone = false
  const reads = { ok: 0, wrong: [] as string[] }
  const reader = (async () => {
    for (let pass = 0; !gcDone || pass === 0; pass++) {
      for (let i = pass % 3; i < MOUNT_FILES; i += 3) {
        const got = createHash('sha256').update(await readFile(join(mnt, 'data', `f${i}.bin`))).digest('hex')
        if (got === expectedDigest(i)) reads.ok++
        else reads.wrong.push(`f${i}.bin in pass ${pass}`)
      }
    }
  })()

  const results: StoreGcResult[] = []
  const kept: Array<{ ref: string, tar: string }> = []
  let pushed = 0
  let started = 0
  let waiting = 0
  const failures: string[] = []
  const pusher = async (p: number): Promise<void> => {
    const db = openNodeDb(join(work, `pusher-${p}`))
    const opts = { store: openStore(storeUrl, { fs: { fsync: false } }), db, workers: 1, packBytes: 256 * KIB }
    try {
      for (let r = 0; !gcDone || r < 2; r++) {
        const shared = `shared-${p % 2}-${r}`
        const scratch = join(work, `scratch-${p}-${r}.tar`)
        await writeFile(scratch, buildLayerTar([dir('s'), largeFile('s/next.bin', 384 * KIB + r, shared), file('s/id', `${p}/${r}`)]))
        const tar = join(work, `kept-${p}-${r}.tar`)
        await writeFile(tar, buildLayerTar([dir('app'), largeFile('app/shared.bin', 384 * KIB + r, shared), largeFile('app/own.bin', 160 * KIB, `own-${p}-${r}`), file('app/id', `${p}/${r}\n`)]))
        const ref = `fire/p${p}:r${r}`
        try {
          await pushImage(scratch, parseRef(`fire/p${p}-scratch:r${r}`), opts)
          await deleteRef(opts.store, parseRef(`fire/p${p}-scratch:r${r}`))
          // The kept push starts once a gc round that sees the scratch image as garbage has begun:
          // it then dedups against a blob that gc has condemned, or is about to.
          const round = started
          waiting++
          while (!gcDone && started === round) await sleep(10)
          waiting--
          await pushImage(tar, parseRef(ref), opts)
          kept.push({ ref, tar })
          pushed++
          if (process.env.GC_FIRE_DEBUG !== undefined) console.error(`pushed ${ref}`)
        } catch (err) {
          failures.push(`${ref}: ${(err as Error).message}`)
        }
      }
    } finally {
      await opts.store.close()
      db.close()
    }
  }
  const pushers = Array.from({ length: PUSHERS }, async (_, p) => await pusher(p))

  try {
    for (let round = 0; round < GC_ROUNDS; round++) {
      // Each round starts once a push has landed since the last one, or a pusher waits for a round
      // (its scratch image is garbage now), so every round races live pushes.
      const seen = pushed
      while (round > 0 && pushed === seen && waiting === 0 && failures.length === 0) await sleep(20)
      started++
      results.push(await gcStore(store, { graceMs: 0 }))
      if (process.env.GC_FIRE_DEBUG !== undefined) console.error(`gc round ${round}: ${JSON.stringify(results.at(-1))}`)
    }
  } finally {
    gcDone = true
  }
  await Promise.all(pushers)
  await reader

  t.same(failures, [], 'every push succeeded')
  t.same(reads.wrong, [], `the mount read correct bytes every time (${reads.ok} file reads)`)
  const deleted = results.reduce((n, r) => n + r.deletedObjects, 0)
  const waited = results.reduce((n, r) => n + r.waitedLeases, 0)
  const rescued = results.reduce((n, r) => n + r.rescuedObjects, 0)
  t.ok(deleted > 0, `gc deleted ${deleted} objects over ${GC_ROUNDS} rounds while the pushes ran`)
  t.ok(waited > 0, `gc waited for ${waited} pushes' leases`)
  t.comment(`${kept.length} kept pushes, ${deleted} objects deleted, ${waited} leases waited for, ${rescued} condemned objects rescued by a re-mark or a rewrite`)

  // One last collection with nothing running: it must not break anything either.
  await gcStore(store, { graceMs: 0 })
  const fetcher = new ChunkFetcher(store, new MemoryChunkCache())
  t.teardown(() => fetcher.close())
  let exact = 0
  for (const { ref, tar } of kept) {
    const out = join(work, `export-${ref.replace(/[/:]/g, '-')}.tar`)
    await exportImage(await loadImage(store, ref), fetcher, { tarFile: out })
    const diff = compareTrees(await snapshotTar(tar), await snapshotTar(out), { labels: ['pushed', 'exported'], skip: p => p === '' })
    if (diff.length === 0) exact++
    else t.fail(`${ref} does not export as pushed: ${diff.slice(0, 3).join('; ')}`)
  }
  t.equal(exact, kept.length, `all ${kept.length} kept refs export exactly what was pushed`)
  const again = createHash('sha256').update(await readFile(join(mnt, 'data', 'f7.bin'))).digest('hex')
  t.equal(again, expectedDigest(7), 'the mount still reads correctly after the last gc')
  t.equal(await mountsUnder(mnt), 1)
  await stopAll()
})
