/**
 * A full disk is not a crash (issue 19): the node's home on a small tmpfs
 * that fills up during a full-tree read of the python image. The read gets
 * every byte right (sha256 of every file against the source tree), layerd
 * stays up (same pid), the failure is logged and counted, and once space
 * is freed the cache fills again (its bytes grow, a later mount fetches
 * nothing more).
 */
import t from 'tap'
import { execFileSync } from 'node:child_process'
import { mkdirSync, rmSync, statfsSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { compareTrees, snapshotTree } from '../../fixtures/tree-compare.js'
import { pushInto } from '../../fixtures/store-steps.js'

const TMPFS_MIB = 128
/** Room left for the cache once the filler is written: far less than the image's ~70 MB of chunks. */
const LEFT_FREE_MIB = 16
const MIB = 1024 * 1024

const images = await ensureDebianImages()
const python = images.images['python-v1']
const work = t.testdir()
const storeUrl = `file://${join(work, 'store')}`
await pushInto(storeUrl, python.dockerArchive, 'deb/python:v1')
const expected = await snapshotTree(python.rootfs)

t.test('a home that fills up during a full-tree read: correct bytes, layerd stays up, caching resumes once space is freed', async t => {
  const home = join(work, 'home')
  mkdirSync(home)
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_MIB}m,mode=0700`, 'tmpfs', home])
  t.teardown(() => { execFileSync('umount', ['-l', home]) })
  const node = layerdNode(home, { store: storeUrl })
  t.teardown(() => node.stopDaemon())
  const daemon = await node.startDaemon()
  let log = ''
  daemon.stderr!.on('data', (c: Buffer) => { log += c.toString() })
  const pid = await node.daemonPid()

  const filler = join(home, 'filler')
  const free = (): number => { const s = statfsSync(home); return s.bavail * s.bsize }
  await writeFiller(filler, free() - LEFT_FREE_MIB * MIB)
  t.ok(free() <= (LEFT_FREE_MIB + 1) * MIB, `${(free() / MIB).toFixed(1)} MiB left on the home`)

  const stats = async (mnt?: string): Promise<any> => JSON.parse((await node.layerctl('stats', ...(mnt === undefined ? [] : [mnt]), '--json')).stdout)
  const readAll = async (name: string): Promise<{ mnt: string, differences: string[] }> => {
    const mnt = join(work, name)
    mkdirSync(mnt)
    const r = await node.layerctl('mount', 'deb/python:v1', mnt)
    t.equal(r.code, 0, r.stderr)
    t.teardown(async () => { await node.layerctl('umount', mnt) })
    const got = await snapshotTree(mnt)
    return { mnt, differences: compareTrees(expected, got, { skip: p => p === '', labels: ['source', 'mount'] }) }
  }

  const first = await readAll('mnt1')
  t.same(first.differences, [], `every file of the image read back with the right sha256 while the disk was full (${expected.size} paths)`)
  const full = await stats()
  t.equal(full.daemon.pid, pid, 'the same layerd served the whole read')
  t.ok(full.cache.writeFailures > 0, `${full.cache.writeFailures} failed cache commits counted`)
  t.ok(full.cache.writeErrors > 0, `${full.cache.writeErrors} entries dropped, served without caching`)
  t.equal(full.daemon.unhandledRejections, 0, 'no unhandled rejection')
  t.equal((await stats(first.mnt)).ioErrors, 0, 'no reader got EIO')
  t.match(log, /chunk cache .* cannot write \(E[A-Z]+: [^)]*\): serving chunks without caching them/, 'the cause is logged')
  const episodes = (log.match(/cannot write \(/g) ?? []).length
  t.ok(episodes <= full.cache.writeFailures, `logged once per episode (${episodes} episodes, ${full.cache.writeFailures} failed commits)`)

  rmSync(filler)
  const before = full.cache.bytes
  const second = await readAll('mnt2')
  t.same(second.differences, [], 'a second full read after freeing space is right too')
  const freed = await stats()
  t.equal(freed.daemon.pid, pid, 'still the same layerd')
  t.equal(freed.cache.writesFailing, false, 'writes succeed again')
  t.ok(freed.cache.bytes > before + 20 * MIB, `the cache grew again: ${(before / MIB).toFixed(1)} → ${(freed.cache.bytes / MIB).toFixed(1)} MiB`)

  // Chunks the second read got while the write probe still backed off (1 s doubling to 30 s: long after a slow,
  // loaded first read) were served uncached. A pull now, with writes working, caches whatever is missing.
  const pull = await node.layerctl('pull', 'deb/python:v1', '--all')
  t.equal(pull.code, 0, pull.stderr)
  const third = await readAll('mnt3')
  t.same(third.differences, [])
  const s3 = await stats(third.mnt)
  t.ok(s3.fetchedBytes < s3.storedBytes * 0.05, `a third mount is served from the cache: fetched ${s3.fetchedBytes} of ${s3.storedBytes} stored bytes`)
  t.equal((await stats()).daemon.pid, pid)
})

/** Write `bytes` of zeros to `path` (stops early, without failing, when the disk is full). */
async function writeFiller (path: string, bytes: number): Promise<void> {
  const fh = await open(path, 'w')
  try {
    const block = Buffer.alloc(MIB)
    for (let done = 0; done < bytes;) {
      const n = Math.min(block.length, bytes - done)
      await fh.write(block, 0, n)
      done += n
    }
  } finally {
    await fh.close()
  }
}
