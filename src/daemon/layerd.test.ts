/**
 * Issue 3's acceptance, on the real Debian python image: a real layerd
 * process, real FUSE mounts, the fs store, and S3 (s3rver) for the full walk
 * (store outages: store-outage.test.ts).
 */
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { readFile, readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode, run, type LayerdNode } from '../../fixtures/layerd-harness.js'
import { startS3rver, S3RVER_CREDENTIALS } from '../../fixtures/s3rver.js'
import { compareTrees, snapshotTree } from '../../fixtures/tree-compare.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { pushInto } from '../../fixtures/store-steps.js'

const images = await ensureDebianImages()
const python = images.images['python-v1']
const work = t.testdir()
const sharedStore = `file://${join(work, 'store')}`
await pushInto(sharedStore, python.dockerArchive, 'deb/python:v1')
const expectedTree = await snapshotTree(python.rootfs)

/** A fresh node (cold cache) on the shared store, with its daemon stopped at the end. */
async function freshNode (t: Test, name: string, store = sharedStore, env: NodeJS.ProcessEnv = {}): Promise<LayerdNode> {
  const node = layerdNode(join(work, name), { store, env })
  t.teardown(async () => { await node.stopDaemon() })
  await node.startDaemon()
  return node
}


async function mount (t: Test, node: LayerdNode, dir: string): Promise<string> {
  const mountpoint = join(node.home, dir)
  const r = await node.layerctl('mount', 'deb/python:v1', mountpoint)
  t.equal(r.code, 0, r.stderr)
  return mountpoint
}

async function stats (node: LayerdNode, mountpoint: string): Promise<Record<string, number>> {
  const r = await node.layerctl('stats', mountpoint, '--json')
  return JSON.parse(r.stdout)
}

/** A real S3 endpoint on loopback holding the python image; stopped at the end of `t`. */
async function s3WithImage (t: Test, name: string): Promise<{ s3: Awaited<ReturnType<typeof startS3rver>>, url: string, env: NodeJS.ProcessEnv }> {
  const s3 = await startS3rver(join(work, name))
  t.teardown(() => s3.stop())
  const env = { AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey, LAYERD_S3_ENDPOINT: s3.endpoint }
  Object.assign(process.env, env)
  const url = `s3://${s3.bucket}/layerd`
  const store = openStore(url, { s3Endpoint: s3.endpoint })
  await pushImage(python.dockerArchive, parseRef('deb/python:v1'), { store, db: openMemoryNodeDb() })
  await store.close()
  return { s3, url, env }
}

for (const backend of ['fs', 's3'] as const) {
  t.test(`a cold mount serves every file and attribute of the image (full walk, ${backend} store)`, async t => {
    const node = backend === 'fs'
      ? await freshNode(t, 'walk')
      : await (async () => { const { url, env } = await s3WithImage(t, 's3-walk'); return await freshNode(t, 's3-walk-node', url, env) })()
    await fullWalk(t, node)
  })
}

async function fullWalk (t: Test, node: LayerdNode): Promise<void> {
  const mnt = await mount(t, node, 'mnt')
  const got = await snapshotTree(mnt)
  t.same(compareTrees(expectedTree, got, { skip: p => p === '', labels: ['source', 'mount'] }), [], `${got.size} paths equal`)
  const s = await stats(node, mnt)
  t.equal(s.corruptChunks, 0)
  t.ok(s.fetchedBytes >= s.storedBytes * 0.9, 'a full walk reads (almost) every chunk once')
  t.ok(s.fetchedBytes <= s.storedBytes * 1.1, `… and no more (${s.fetchedBytes} of ${s.storedBytes})`)
  // A walk lists directories with READDIRPLUS, which fills the kernel's entry cache: it needs no LOOKUPs.
  const ops = (s as unknown as { fuseOps?: Record<'requests' | 'lookups' | 'readdirs' | 'opens' | 'reads', number> }).fuseOps
  t.ok(ops !== undefined && ops.readdirs > 0 && ops.opens > 0 && ops.reads > 0, `the FUSE requests are counted by kind: ${JSON.stringify(ops)}`)
  t.ok(ops !== undefined && ops.requests >= ops.lookups + ops.readdirs + ops.opens + ops.reads, '… each one also in the total')
}

t.test('python3 imports json, sqlite3 and ssl from a cold cache, fetching under 15% of the image', async t => {
  const node = await freshNode(t, 'python')
  const mnt = await mount(t, node, 'mnt')
  const r = await run('chroot', [mnt, '/usr/bin/python3', '-c', 'import json, sqlite3, ssl; print("imported")'], process.env)
  t.equal(r.code, 0, r.stderr)
  t.equal(r.stdout.trim(), 'imported')
  const s = await stats(node, mnt)
  const pct = (100 * s.fetchedBytes) / s.storedBytes
  t.ok(pct < 15, `fetched ${s.fetchedBytes} of ${s.storedBytes} stored bytes (${pct.toFixed(1)}%)`)

  const second = join(node.home, 'mnt2')
  t.equal((await node.layerctl('mount', 'deb/python:v1', second)).code, 0)
  const again = await run('chroot', [second, '/usr/bin/python3', '-c', 'import json, sqlite3, ssl'], process.env)
  t.equal(again.code, 0)
  t.equal((await stats(node, second)).fetchedBytes, 0, 'a second mount with a warm cache fetches nothing')

  t.equal((await node.layerctl('umount', mnt)).code, 0)
  const traced = JSON.parse((await node.layerctl('prefetch', second, '--wait', '--json')).stdout)
  t.ok(traced.traced > 0, `the unmounted mount left an access trace of ${traced.traced} chunks, prefetched first`)
  t.equal(traced.failed, 0)
  await node.stopDaemon()
  await node.startDaemon()
  const restored = JSON.parse((await node.layerctl('mounts', '--json')).stdout)
  t.equal(restored.length, 0, 'a clean stop forgets its mounts')
  const third = await mount(t, node, 'mnt3')
  t.equal((await run('chroot', [third, '/usr/bin/python3', '-c', 'import json, sqlite3, ssl'], process.env)).code, 0)
  t.equal((await stats(node, third)).fetchedBytes, 0, 'after a restart the persistent cache serves everything')
})

t.test('16 concurrent readers of overlapping files get the right bytes, without fetching a chunk twice', async t => {
  const files = ['usr/bin/python3.11', 'usr/lib/x86_64-linux-gnu/libcrypto.so.3', 'usr/lib/python3.11/typing.py', 'usr/bin/bash']
  const readAll = async (mnt: string, readers: number): Promise<void> => {
    await Promise.all(Array.from({ length: readers }, async (_, i) => {
      for (let k = 0; k < files.length; k++) {
        const f = files[(i + k) % files.length]!
        const [got, want] = await Promise.all([readFile(join(mnt, f)), readFile(join(python.rootfs, f))])
        if (!got.equals(want)) throw new Error(`reader ${i}: ${f} differs`)
      }
    }))
  }
  const one = await freshNode(t, 'sequential')
  const m1 = await mount(t, one, 'mnt')
  await readAll(m1, 1)
  const sequential = (await stats(one, m1)).fetchedBytes
  const many = await freshNode(t, 'concurrent')
  const m16 = await mount(t, many, 'mnt')
  await readAll(m16, 16)
  const concurrent = await stats(many, m16)
  t.pass('16 readers read identical bytes')
  t.ok(concurrent.fetchedBytes <= sequential * 1.05, `16 readers fetched ${concurrent.fetchedBytes} bytes, one reader ${sequential}`)
})

t.test('a corrupt chunk in the store gives EIO, is counted and never served', async t => {
  const storeDir = join(work, 'corrupt-store')
  await run('cp', ['-a', join(work, 'store'), storeDir], process.env)
  const blobs = join(storeDir, 'blobs')
  for (const b of await readdir(blobs)) { // flip bytes in the middle of every blob
    const path = join(blobs, b)
    const bytes = await readFile(path)
    for (let i = 100; i < bytes.length; i += 64 * 1024) bytes[i] = bytes[i]! ^ 0xff
    await writeFile(path, bytes)
  }
  const node = await freshNode(t, 'corrupt', `file://${storeDir}`)
  const mnt = await mount(t, node, 'mnt')
  const r = await run('cat', [join(mnt, 'usr/bin/python3.11')], process.env)
  t.not(r.code, 0)
  t.match(r.stderr, /Input\/output error/)
  const s = await stats(node, mnt)
  t.ok(s.corruptChunks > 0, `${s.corruptChunks} corrupt chunks counted`)
  const again = await run('cat', [join(mnt, 'usr/bin/python3.11')], process.env)
  t.match(again.stderr, /Input\/output error/, 'still refused: the bad bytes were not cached')
})

t.test('killing layerd fails readers fast; the next daemon cleans the stale mount and serves it again', async t => {
  const node = await freshNode(t, 'killed')
  const mnt = await mount(t, node, 'mnt')
  // Each pass drops the file from the page cache (dd iflag=nocache), so every pass reads through the daemon:
  // pages already cached keep being served after a kill; a read that needs the daemon must fail, not hang.
  const reader = spawn('sh', ['-c', `while :; do dd if=${mnt}/usr/lib/x86_64-linux-gnu/libcrypto.so.3 of=/dev/null bs=1M iflag=nocache status=none || exit 3; done`])
  const exited = new Promise<number | null>(resolve => reader.on('exit', code => resolve(code)))
  await new Promise(resolve => setTimeout(resolve, 500))
  await node.killDaemon()
  const started = Date.now()
  const code = await Promise.race([exited, new Promise<'hang'>(resolve => setTimeout(() => resolve('hang'), 10_000))])
  if (code === 'hang') reader.kill('SIGKILL')
  t.equal(code, 3, `the reader got an error ${Date.now() - started} ms after the kill`)
  const stale = await run('stat', ['-f', mnt], process.env)
  t.match(stale.stderr, /Transport endpoint is not connected|Input\/output error/, 'statfs, which always asks the daemon, fails')
  await node.startDaemon()
  const after = await run('cat', [join(mnt, 'etc/os-release')], process.env)
  t.equal(after.code, 0, 'the restarted daemon cleaned the mountpoint and mounted the image again')
  t.match(after.stdout, /Debian/)
})
