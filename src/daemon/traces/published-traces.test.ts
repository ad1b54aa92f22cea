/**
 * Published access traces end to end, on the real python image: a node's
 * trace published to the fs store with `layerctl trace publish`, a fresh
 * node prefetching it at mount so the workload's reads are cache hits, a
 * corrupt trace ignored, and store gc keeping a trace exactly as long as
 * its manifest.
 */
import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import { readFile, stat, utimes, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../../fixtures/debian-images.js'
import { layerdNode, type LayerdNode } from '../../../fixtures/layerd-harness.js'
import { copyPushedStore, ATTACK_IMAGE } from '../../attacks/attack-harness.js'
import { digestHex } from '../../format/digest.js'
import { traceKey } from '../../format/keys.js'

const IMAGE = ATTACK_IMAGE
const python = (await ensureDebianImages()).images['python-v1']
const work = t.testdir()
const storeDir = join(work, 'store')
await copyPushedStore(storeDir)
const store = `file://${storeDir}`
/** Files a workload reads: some small, one large. */
const FILES = ['usr/lib/python3.11/json/decoder.py', 'usr/lib/python3.11/json/encoder.py', 'usr/lib/python3.11/sqlite3/dbapi2.py', 'etc/passwd', 'usr/bin/python3.11']

async function node (t: Test, name: string): Promise<LayerdNode & { log: () => string }> {
  const n = layerdNode(join(work, name), { store })
  t.teardown(async () => { await n.stopDaemon() })
  const child = await n.startDaemon()
  let log = ''
  child.stderr?.on('data', (c: Buffer) => { log += c.toString() })
  return { ...n, log: () => log }
}
async function ok (n: LayerdNode, ...args: string[]): Promise<string> {
  const r = await n.layerctl(...args)
  if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')}: exit ${r.code}: ${r.stderr}`)
  return r.stdout
}
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex')
async function readAll (root: string): Promise<string[]> { return await Promise.all(FILES.map(async f => sha(await readFile(join(root, f))))) }
const expected = await readAll(python.rootfs)
async function mountStats (n: LayerdNode, mnt: string): Promise<{ chunkMisses: number, prefetchedChunks: number, fetches: number }> {
  return JSON.parse(await ok(n, 'stats', mnt, '--json'))
}

let manifest = ''
t.test('layerctl trace publish writes traces/<manifest> from the trace of a mount that ended, and refuses when there is none', async t => {
  const a = await node(t, 'node-a')
  const refused = await a.layerctl('trace', 'publish', IMAGE)
  t.equal(refused.code, 1, 'no mount has ended: nothing to publish')
  t.match(refused.stderr, /no mount of it .* has ended on this node yet/)
  const mnt = join(a.home, 'mnt')
  await ok(a, 'mount', IMAGE, mnt)
  t.same(await readAll(mnt), expected)
  await ok(a, 'umount', mnt)
  const r = JSON.parse(await ok(a, 'trace', 'publish', IMAGE, '--json')) as { manifest: string, key: string, chunks: number }
  manifest = r.manifest
  t.equal(r.key, traceKey(digestHex(r.manifest as `sha256:${string}`)))
  t.ok(r.chunks > 0, `${r.chunks} chunks published`)
  const body = JSON.parse(await readFile(join(storeDir, r.key), 'utf8')) as { chunks: unknown[], manifest: string }
  t.equal(body.manifest, r.manifest)
  t.equal(body.chunks.length, r.chunks)
  const usage = await a.layerctl('trace', 'bogus', IMAGE)
  t.equal(usage.code, 2, 'a wrong subcommand is a usage error')
})

t.test('a fresh node prefetches the published trace at mount: the same reads are then cache hits with correct bytes', async t => {
  const b = await node(t, 'node-b')
  const mnt = join(b.home, 'mnt')
  await ok(b, 'mount', IMAGE, mnt)
  const published = (JSON.parse(await readFile(join(storeDir, traceKey(digestHex(manifest as `sha256:${string}`))), 'utf8')) as { chunks: unknown[] }).chunks.length
  const deadline = Date.now() + 30_000
  let s = await mountStats(b, mnt)
  while (s.prefetchedChunks < published && Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 100))
    s = await mountStats(b, mnt)
  }
  t.ok(s.prefetchedChunks >= published, `prefetched ${s.prefetchedChunks} of the ${published} traced chunks before any read`)
  t.equal(s.chunkMisses, 0, 'nothing was read yet')
  t.same(await readAll(mnt), expected, 'the workload reads the right bytes')
  const after = await mountStats(b, mnt)
  t.equal(after.chunkMisses, 0, 'every chunk the workload read was already cached')
  t.equal(after.fetches, s.fetches, 'and no GET was made for it')
})

t.test('a corrupt published trace is ignored: the mount works and reads are correct', async t => {
  const key = join(storeDir, traceKey(digestHex(manifest as `sha256:${string}`)))
  const good = await readFile(key)
  const { atime, mtime } = await stat(key)
  // Put it back as it was, times included: a trace written within a second of a gc counts as written after
  // its condemnation, and the gc subtest below would find it rescued (it did, on a fast run).
  t.teardown(async () => { await writeFile(key, good); await utimes(key, atime, mtime) })
  await writeFile(key, JSON.stringify({ schemaVersion: 1, mediaType: 'application/vnd.layerd.trace.v1+json', manifest, chunks: [[7, 0]] }))
  const c = await node(t, 'node-c')
  const mnt = join(c.home, 'mnt')
  await ok(c, 'mount', IMAGE, mnt)
  t.same(await readAll(mnt), expected)
  const s = await mountStats(c, mnt)
  t.ok(s.chunkMisses > 0, 'the reads went to the store')
  t.match(c.log(), /published access trace of sha256:[0-9a-f]{64}: .*traces\/[0-9a-f]{64}: not a layerd access trace of .*entry 0 \(\[7,0\]\)/, 'the daemon logged why it ignored the trace')
  t.notMatch(c.log(), /prefetching the \d+ chunks of/, 'and prefetched nothing from it')
})

t.test('layerctl gc store keeps a trace while its manifest lives, and deletes it with the manifest', async t => {
  const g = layerdNode(join(work, 'gc-node'), { store })
  const key = join(storeDir, traceKey(digestHex(manifest as `sha256:${string}`)))
  await ok(g, 'gc', 'store', '--grace', '0')
  t.ok(await stat(key).then(() => true, () => false), 'kept: its manifest is live')
  await ok(g, 'rm', IMAGE)
  await ok(g, 'gc', 'store', '--grace', '0')
  t.notOk(await stat(key).then(() => true, () => false), 'deleted with its manifest')
})
