/**
 * Issue 14: proactive reclaim never drops a page that is being read. A real
 * layerd serves the real python image on a kernel FUSE mount; readers hash
 * its files (sha256 against the source tree) over and over while reclaim
 * passes run back to back (each drops the page cache of every file read
 * since the last one, the chunk cache file's page cache, and the daemon's
 * own caches). Every byte must be right and no read may fail. The test also
 * checks that reclaim really drops pages (a file read twice is served from
 * the page cache; after a pass its next read reaches the daemon again), or
 * it would prove nothing.
 */
import t from 'tap'
import { createHash } from 'node:crypto'
import { mkdirSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../../fixtures/debian-images.js'
import { layerdNode } from '../../../fixtures/layerd-harness.js'
import { snapshotTree } from '../../../fixtures/tree-compare.js'
import { parseRef } from '../../format/ref.js'
import { pushImage } from '../../image/push.js'
import { openMemoryNodeDb } from '../../state/node-db.js'
import { openStore } from '../../store/open-store.js'
import { ControlClient } from '../client/control-client.js'
import { socketPath } from '../client/control-protocol.js'

const READERS = 4
const PASSES = 40
const MAX_FILE_BYTES = 4 * 1024 * 1024

const images = await ensureDebianImages()
const python = images.images['python-v1']
const work = t.testdir()
const storeUrl = `file://${join(work, 'store')}`
{
  const store = openStore(storeUrl)
  await pushImage(python.dockerArchive, parseRef('deb/python:v1'), { store, db: openMemoryNodeDb() })
  await store.close()
}
const expected = [...(await snapshotTree(python.rootfs, { xattrs: false }))]
  .filter(([, f]) => f.type === 'file' && f.size > 0 && f.size <= MAX_FILE_BYTES)
  .map(([path, f]) => ({ path, size: f.size, sha256: f.sha256! }))

t.test('reclaim passes while readers hash the mount: 0 wrong bytes, 0 errors, and pages really dropped', async t => {
  const node = layerdNode(join(work, 'node'), { store: storeUrl })
  t.teardown(async () => { await node.stopDaemon() })
  await node.startDaemon()
  const mnt = join(work, 'mnt')
  mkdirSync(mnt)
  const m = await node.layerctl('mount', 'deb/python:v1', mnt)
  t.equal(m.code, 0, m.stderr)
  t.teardown(async () => { await node.layerctl('umount', mnt) })
  const client = await ControlClient.connect(socketPath(node.home))
  t.teardown(() => client.close())
  const readOps = async (): Promise<number> => {
    const s = await client.call('stats', { mountpoint: mnt }) as { syncReads: number, fetchReads: number }
    return s.syncReads + s.fetchReads
  }

  // Reclaim drops pages: a big file read twice is a page-cache hit the second time, and a miss after a pass.
  const big = expected.reduce((a, b) => (b.size > a.size ? b : a))
  await readFile(join(mnt, big.path))
  const warm = await readOps()
  await readFile(join(mnt, big.path))
  t.equal(await readOps(), warm, `a second read of ${big.path} is served from the page cache`)
  await client.call('memory', { reclaim: true })
  await readFile(join(mnt, big.path))
  t.ok(await readOps() > warm, 'after a reclaim pass, its next read reaches the daemon again (its pages were dropped)')

  let stop = false
  let verified = 0
  let wrong = 0
  const errors: string[] = []
  const reader = async (seed: number): Promise<void> => {
    for (let i = seed; !stop; i += READERS) {
      const e = expected[i % expected.length]!
      try {
        const sha = createHash('sha256').update(await readFile(join(mnt, e.path))).digest('hex')
        if (sha === e.sha256) verified++
        else { wrong++; errors.push(`${e.path}: sha256 ${sha}, expected ${e.sha256}`) }
      } catch (err) {
        errors.push(`${e.path}: ${(err as Error).message}`)
      }
    }
  }
  const readers = Array.from({ length: READERS }, async (_, i) => await reader(i * 997))
  const before = (await client.call('memory', {})).reclaim!
  for (let pass = 0; pass < PASSES; pass++) {
    await client.call('memory', { reclaim: true })
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  stop = true
  await Promise.all(readers)
  const after = (await client.call('memory', {})).reclaim!
  t.comment(`${verified} files verified, ${after.passes - before.passes} passes, ${after.filesDropped - before.filesDropped} file page caches dropped while reading`)
  t.equal(wrong, 0, 'no wrong byte')
  t.same(errors.slice(0, 5), [], 'no read failed')
  t.ok(after.passes - before.passes >= PASSES, `${PASSES} passes ran`)
  t.ok(after.filesDropped - before.filesDropped > PASSES, 'the passes dropped the page cache of files being read')
  t.ok(verified > expected.length / 2, `the readers covered the image (${verified} of ${expected.length} files)`)
})
