// FUSE passthrough on real mounts (kernel backend, Linux 6.9+): files whose
// chunks are all cached are copied into a HotFileStore and then read by the
// kernel from the copy. Every test checks bytes against the reference content.
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { open, readFile, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { HotFileStore } from '../cache/hot-file-store.js'
import { MemoryChunkCache } from '../cache/memory-chunk-cache.js'
import { DEFAULT_FUSE_OPTIONS, mountImage, type ImageMount } from './image-mount.js'
import { kernelFuseUnavailable } from './kernel-fuse.js'
import { MemoryChunkReader } from './memory-chunk-reader.js'
import { MemoryImage, patternBytes } from './memory-image.js'

const run = promisify(execFile)
const why = kernelFuseUnavailable(DEFAULT_FUSE_OPTIONS)
if (why !== undefined) t.plan(0, `kernel FUSE backend unavailable: ${why}`)

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

/** path → content of the test image: many small files, a multi-chunk one, a binary, and a shared file. */
function reference (): Map<string, Buffer> {
  const files = new Map<string, Buffer>()
  for (let i = 0; i < 40; i++) files.set(`lib/f${i}`, patternBytes(1000 + i * 997, i))
  files.set('big', patternBytes(3 * 1024 * 1024 + 17, 99))
  files.set('shared', patternBytes(50_000, 5))
  files.set('bin/true', readFileSync('/bin/true'))
  return files
}

function image (files: Map<string, Buffer>): MemoryImage {
  const img = new MemoryImage()
  img.addLayer([
    { path: 'lib', type: 'dir' }, { path: 'bin', type: 'dir' },
    ...[...files].map(([path, content]) => ({ path, type: 'file' as const, content, mode: path.startsWith('bin/') ? 0o755 : 0o644 })),
    { path: 'lib/hardlink', type: 'hardlink', target: 'shared' }
  ], { chunkSize: 256 * 1024 })
  return img
}

interface Rig { dir: string, mount: ImageMount, store: HotFileStore, cache: MemoryChunkCache, files: Map<string, Buffer> }

async function rig (t: Test, opts: { capBytes?: number, passthrough?: boolean } = {}): Promise<Rig> {
  const files = reference()
  const img = image(files)
  const cache = new MemoryChunkCache({ capBytes: opts.capBytes ?? 1 << 30, maintenanceIntervalMs: 0 })
  const store = await HotFileStore.open(join(t.testdirName, 'hot'), cache.derivedQuota())
  const dir = join(t.testdirName, 'mnt')
  const mount = await mountImage({
    mountpoint: dir, tocs: img.tocs, reader: new MemoryChunkReader({ store: img.chunks, warm: true }), log: t.comment,
    fuse: { backend: 'kernel', passthrough: opts.passthrough ?? true }, hotFiles: { store }
  })
  t.teardown(async () => {
    await mount.unmount()
    await rm(t.testdirName, { recursive: true, force: true, maxRetries: 5 })
  })
  return { dir, mount, store, cache, files }
}

/** sha256 of every reference file read through the mount, in a child process (reads never need this thread, but a child is what a sandbox is). */
async function readAll (r: Rig): Promise<Map<string, string>> {
  const paths = [...r.files.keys(), 'lib/hardlink']
  const { stdout } = await run('sha256sum', paths.map(p => join(r.dir, p)), { maxBuffer: 1 << 20 })
  const out = new Map<string, string>()
  for (const line of stdout.trim().split('\n')) {
    const [digest, path] = line.split(/\s+/)
    out.set(path!.slice(r.dir.length + 1), digest!)
  }
  return out
}

function expected (r: Rig): Map<string, string> {
  const m = new Map([...r.files].map(([p, c]) => [p, sha(c)]))
  m.set('lib/hardlink', sha(r.files.get('shared')!))
  return m
}

async function copiesSettled (r: Rig, files: number): Promise<void> {
  for (let i = 0; i < 200 && r.store.stats().files < files; i++) await new Promise(resolve => setTimeout(resolve, 25))
}

const opens = (r: Rig): number => r.mount.serverCounters()!.passthroughOpens

t.test('exact bytes: every file, read before and after its copy, and passthrough serves the second pass', async t => {
  const r = await rig(t)
  t.ok(r.mount.passthrough, 'the kernel settled FUSE_PASSTHROUGH')
  t.same(await readAll(r), expected(r), 'first pass (through layerd)')
  t.equal(opens(r), 0, 'no copy yet, so no passthrough open')
  await copiesSettled(r, r.files.size)
  // hardlink and shared are one inode; every distinct content is one copy.
  t.equal(r.store.stats().files, r.files.size, 'one copy per distinct content')
  const reads = r.mount.serverCounters()!.reads
  t.same(await readAll(r), expected(r), 'second pass (passthrough)')
  t.ok(opens(r) >= r.files.size, `passthrough opens: ${opens(r)}`)
  t.equal(r.mount.serverCounters()!.reads, reads, 'the second pass sent layerd no READ')
  for (const name of await readdir(r.store.dir)) {
    const s = await stat(join(r.store.dir, name))
    t.equal(s.mode & 0o777, 0o444, `copy ${name.slice(0, 8)} is read-only`)
  }
  t.equal((await stat(r.store.dir)).mode & 0o777, 0o700, 'the store is private to the daemon')
  t.equal(r.cache.stats().bytes, r.store.stats().bytes, 'the copies count against the node cache quota')
})

t.test('without passthrough nothing is copied or opened through it (control)', async t => {
  const r = await rig(t, { passthrough: false })
  t.equal(r.mount.passthrough, undefined)
  t.same(await readAll(r), expected(r))
  await new Promise(resolve => setTimeout(resolve, 200))
  t.same(await readAll(r), expected(r))
  t.equal(opens(r), 0)
  t.equal(r.store.stats().files, 0)
})

t.test('mmap and exec of a passthrough file', async t => {
  const r = await rig(t)
  await readAll(r)
  await copiesSettled(r, r.files.size)
  const before = opens(r)
  await run(join(r.dir, 'bin/true'))
  const { stdout } = await run('python3', ['-c', 'import mmap,sys,hashlib\nf=open(sys.argv[1],"rb")\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nprint(hashlib.sha256(m[:]).hexdigest())', join(r.dir, 'big')])
  t.equal(stdout.trim(), sha(r.files.get('big')!), 'mmap reads the exact bytes')
  t.ok(opens(r) >= before + 2, 'exec and mmap opened through passthrough')
})

t.test('eviction while a file is open, and opens racing it', async t => {
  const r = await rig(t)
  await readAll(r)
  await copiesSettled(r, r.files.size)
  const big = r.files.get('big')!
  const held = await open(join(r.dir, 'big'))
  const before = opens(r)
  t.ok(before > 0)
  await r.store.shed(Infinity)
  t.equal(r.store.stats().files, 0, 'every copy evicted')
  t.equal(r.cache.stats().bytes, 0, 'and its space given back to the quota')
  const buf = Buffer.alloc(big.length)
  await held.read(buf, 0, big.length, 0)
  t.equal(sha(buf), sha(big), 'the open file still reads its (unlinked) copy')
  // While it is open, new opens must keep the same backing (a second one, or a cached open, fails with EIO).
  const racing = await Promise.all(Array.from({ length: 8 }, async () => sha(await readFile(join(r.dir, 'big')))))
  t.same(new Set(racing), new Set([sha(big)]), 'opens during the eviction read the right bytes')
  t.ok(opens(r) >= before + 8, 'and went through the retired backing, still in use')
  await held.close()
  // Evicted and closed: opens go through layerd again, and the file is copied again after a full read.
  const settled = opens(r)
  await new Promise(resolve => setTimeout(resolve, 100)) // the kernel's RELEASE of the last file reaches the server
  t.same(await readAll(r), expected(r), 'after the eviction, through layerd')
  t.equal(opens(r), settled, 'no passthrough open without a copy')
  await copiesSettled(r, r.files.size)
  t.same(await readAll(r), expected(r), 'copied again, through passthrough')
  t.ok(opens(r) > settled)
  // Opens racing repeated evictions: every byte right, no EIO.
  const storm = Array.from({ length: 6 }, async () => { for (let i = 0; i < 5; i++) t.same(await readAll(r), expected(r)) })
  for (let i = 0; i < 5; i++) { await r.store.shed(Infinity); await new Promise(resolve => setTimeout(resolve, 40)) }
  await Promise.all(storm)
})

t.test('the quota is respected: copies that do not fit are not written', async t => {
  const cap = 1024 * 1024 // the 3 MiB file can never fit
  const r = await rig(t, { capBytes: cap })
  for (let pass = 0; pass < 3; pass++) {
    t.same(await readAll(r), expected(r))
    await new Promise(resolve => setTimeout(resolve, 150))
    t.ok(r.cache.stats().bytes <= cap, `pass ${pass}: usage ${r.cache.stats().bytes} <= cap ${cap}`)
  }
  t.ok(r.store.stats().refused > 0, 'the big file was refused')
  t.ok(r.store.stats().files > 0, 'small files were copied')
})

t.test('a sandbox cannot write or truncate a passthrough file, and the image is unchanged', async t => {
  const r = await rig(t)
  await readAll(r)
  await copiesSettled(r, r.files.size)
  const path = join(r.dir, 'lib/f3')
  for (const attempt of [async () => await writeFile(path, 'x'), async () => await truncate(path, 0), async () => { await (await open(path, 'r+')).close() }]) {
    const code = await attempt().then(() => 'succeeded', (err: NodeJS.ErrnoException) => err.code)
    t.ok(code === 'EROFS' || code === 'EPERM', `refused: ${code}`)
  }
  t.same(await readAll(r), expected(r), 'every file as before')
  t.ok(opens(r) > 0)
})
