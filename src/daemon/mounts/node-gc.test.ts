/**
 * `layerctl gc node` and `layerctl df`'s node section, on a real node: the
 * python image and a small second image in an fs store, a real layerd with
 * real FUSE mounts, and leftovers made as a dying daemon leaves them.
 */
import t from 'tap'
import Database from 'better-sqlite3'
import { createHash } from 'node:crypto'
import { mkdir, readFile, stat, utimes, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../../fixtures/debian-images.js'
import { layerdNode, type LayerdNode } from '../../../fixtures/layerd-harness.js'
import { copyPushedStore, ATTACK_IMAGE } from '../../attacks/attack-harness.js'
import { mountsUnder } from '../../host/mount-table.js'

const python = (await ensureDebianImages()).images['python-v1']
// Registered before t.testdir(), whose own teardown removes the directory: the mount and daemon must go first.
let stopNode = async (): Promise<void> => {}
t.teardown(async () => { await stopNode() })
const work = t.testdir()
const storeDir = join(work, 'store')
await copyPushedStore(storeDir)
const node: LayerdNode = layerdNode(join(work, 'home'), { store: `file://${storeDir}` })
stopNode = async () => { await node.layerctl('umount', join(node.home, 'mnt')); await node.stopDaemon() }
const CACHE_BYTES = 512 * 1024 * 1024
await node.startDaemon(['--cache-size', String(CACHE_BYTES)])

async function ok (...args: string[]): Promise<string> {
  const r = await node.layerctl(...args)
  if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')}: exit ${r.code}: ${r.stderr}`)
  return r.stdout
}
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex')
const FILE = 'usr/lib/python3.11/json/decoder.py'
const traceManifests = (): string[] => {
  const db = new Database(join(node.home, 'state.db'), { readonly: true, fileMustExist: true })
  try { return (db.prepare('SELECT DISTINCT manifest FROM access_traces').all() as Array<{ manifest: string }>).map(r => r.manifest).sort() } finally { db.close() }
}
const exists = async (p: string): Promise<boolean> => await stat(p).then(() => true, () => false)
const cacheStats = async (): Promise<{ metaObjects: number, bytes: number, capBytes: number }> => (JSON.parse(await ok('stats', '--json')) as { cache: { metaObjects: number, bytes: number, capBytes: number } }).cache

// A second, small image, mounted and read once, then removed from the store: its trace and cached metadata go stale.
const smallDir = join(work, 'small')
await mkdir(join(smallDir, 'etc'), { recursive: true })
await writeFile(join(smallDir, 'etc', 'hello'), 'hello from a small image\n')
await ok('push', smallDir, 'small/img:v1')
const mnt = join(node.home, 'mnt')
for (const image of ['small/img:v1', ATTACK_IMAGE]) {
  await ok('mount', image, mnt)
  await readFile(join(mnt, image === ATTACK_IMAGE ? FILE : 'etc/hello'))
  await ok('umount', mnt)
}
const pythonManifest = JSON.parse(await ok('mount', ATTACK_IMAGE, mnt, '--json')).manifest as string // the python image stays mounted
const tracesBefore = traceManifests()
await ok('rm', 'small/img:v1')
await ok('gc', 'store', '--grace', '0')

// Leftovers under <home>/images: an old directory (a daemon died there), a young one (a mount may be on its way).
const images = join(node.home, 'images')
const leftover = join(images, 'leftover-of-a-dead-daemon')
const young = join(images, 'just-made')
await mkdir(join(leftover, 'upper'), { recursive: true })
await writeFile(join(leftover, 'upper', 'f'), 'x')
const old = new Date(Date.now() - 10 * 60_000)
await utimes(leftover, old, old)
await mkdir(young, { recursive: true })

t.test('gc node --dry-run reports what gc node removes, and removes nothing', async t => {
  t.equal(tracesBefore.length, 2, 'two images traced')
  const before = await cacheStats()
  const r = JSON.parse(await ok('gc', 'node', '--dry-run', '--json'))
  t.equal(r.dryRun, true)
  t.same(r.traces.removed, tracesBefore.filter(m => m !== pythonManifest), "the removed image's trace")
  t.equal(r.traces.kept, 1)
  t.same(r.mountDirs.removed, [leftover])
  t.ok(r.metadata.objects >= 2, `${r.metadata.objects} cached metadata objects no mount pins (the small image's manifest and TOC at least)`)
  t.same(r.sandboxes.removed, [])
  t.same(traceManifests(), tracesBefore, 'no trace removed')
  t.ok(await exists(leftover), 'the leftover directory is still there')
  t.equal((await cacheStats()).metaObjects, before.metaObjects, 'no metadata dropped')
})

t.test('gc node removes stale traces, old unmounted directories and unpinned metadata; the live mount keeps working', async t => {
  const before = await cacheStats()
  const r = JSON.parse(await ok('gc', 'node', '--json'))
  t.equal(r.dryRun, false)
  t.same(traceManifests(), [pythonManifest], "only the mounted image's trace is left")
  t.notOk(await exists(leftover), 'the old leftover is gone')
  t.ok(await exists(young), 'a directory younger than the grace is kept')
  t.same(await mountsUnder(join(node.home, 'mnt')), [mnt], 'the live mount is untouched')
  const after = await cacheStats()
  t.equal(after.metaObjects, before.metaObjects - r.metadata.objects, 'the cache lost exactly what gc node reported')
  t.ok(after.metaObjects > 0, "the mounted image's pinned TOCs and manifest stay")
  t.equal(sha(await readFile(join(mnt, FILE))), sha(await readFile(join(python.rootfs, FILE))), 'the mount still reads correct bytes')
  const again = JSON.parse(await ok('gc', 'node', '--json'))
  t.same([again.traces.removed, again.mountDirs.removed, again.metadata.objects], [[], [], 0], 'a second run finds nothing')
})

t.test("df reports the node: the cache's bytes and cap, its watermarks, the mounts and the sandboxes", async t => {
  const r = JSON.parse(await ok('df', '--json')) as { node: { cache: { bytes: number, capBytes: number, highWatermarkBytes: number, lowWatermarkBytes: number }, mounts: number, sandboxes: { count: number, diskBytes: number } } }
  const stats = await cacheStats()
  t.equal(r.node.cache.capBytes, CACHE_BYTES, 'the cap given to the daemon')
  t.ok(r.node.cache.highWatermarkBytes < CACHE_BYTES && r.node.cache.lowWatermarkBytes < r.node.cache.highWatermarkBytes, 'watermarks below the cap, in order')
  t.equal(r.node.cache.bytes, stats.bytes)
  t.ok(r.node.cache.bytes > 0)
  const fuseMounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter(l => l.includes(` ${node.home}/`) && / - fuse/.test(l))
  t.equal(r.node.mounts, fuseMounts.length, 'as many mounts as /proc/self/mountinfo shows FUSE mounts under the home')
  const ps = (await ok('ps', '--json')).trim()
  t.equal(r.node.sandboxes.count, ps === '' ? 0 : (JSON.parse(ps) as unknown[]).length, 'as many sandboxes as layerctl ps lists')
  t.equal(r.node.sandboxes.diskBytes, 0)
})
