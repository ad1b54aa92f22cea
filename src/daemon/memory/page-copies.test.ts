/**
 * PageCopyDropper on a real LmdbChunkCache and a real FsObjectStore (files
 * on this disk; residency read with util-linux's fincore): while active,
 * a store range read and a committed batch leave the page cache, and every
 * byte still reads back; while inactive, nothing is dropped.
 */
import t, { type Test } from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { closeSync, openSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { LmdbChunkCache } from '../../cache/lmdb-chunk-cache.js'
import { FsObjectStore } from '../../store/fs-object-store.js'
import { nativeMemory } from '../../native.js'
import { PageCopyDropper } from './page-copies.js'

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')
const MIB = 1024 * 1024

/** Bytes of `file` in the page cache. */
function resident (file: string): number {
  return Number(execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', file], { encoding: 'utf8' }).trim())
}

/** Every file under `dir`, recursively. */
function filesUnder (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true }).filter(e => e.isFile()).map(e => join(e.parentPath, e.name))
}

/** A 16 MiB blob put in `store`, and its file, dropped from the page cache. */
async function uncachedBlob (store: FsObjectStore, storeDir: string): Promise<{ blob: Buffer, blobFile: string }> {
  const blob = randomBytes(16 * MIB)
  await store.put('blobs/one', blob)
  const [blobFile] = filesUnder(storeDir)
  const fd = openSync(blobFile!, 'r')
  try { nativeMemory().fadviseDontNeed(fd, 0, 0) } finally { closeSync(fd) }
  return { blob, blobFile: blobFile! }
}

async function setup (t: Test, active: boolean | (() => boolean), dropDelayMs?: number): Promise<{ dropper: PageCopyDropper, cache: LmdbChunkCache, store: FsObjectStore, storeDir: string, lines: string[] }> {
  const dir = t.testdir()
  const lines: string[] = []
  const dropper = new PageCopyDropper({ active: typeof active === 'function' ? active : () => active, cacheFile: join(dir, 'cache', 'data.mdb'), log: line => lines.push(line), ...(dropDelayMs === undefined ? {} : { dropDelayMs }) })
  const cache = LmdbChunkCache.open(join(dir, 'cache'), { writeDelayMs: 1, afterCommit: dropper.afterCacheCommit })
  const store = new FsObjectStore(join(dir, 'store'), { afterRead: dropper.afterStoreRead, beforeRead: dropper.beforeStoreRead }) // put fsyncs: clean pages, as a store's are
  t.teardown(async () => { await dropper.idle(); await cache.close(); await store.close() })
  return { dropper, cache, store, storeDir: join(dir, 'store'), lines }
}

t.test('`PageCopyDropper` drops a store range read and the chunk cache pages a commit wrote, and every byte reads back', async t => {
  const { dropper, cache, store, storeDir, lines } = await setup(t, true)
  const blob = randomBytes(8 * MIB)
  await store.put('blobs/one', blob)
  const [blobFile] = filesUnder(storeDir)
  t.ok(resident(blobFile!) >= 4 * MIB, 'the blob just written is in the page cache')
  // A range that starts and ends inside pages, as a chunk's does: its partial pages go too.
  const [from, to] = [1000, 4 * MIB - 1000]
  const range = await store.getRange('blobs/one', from, to - from)
  t.ok(range.equals(blob.subarray(from, to)), 'the range reads back')
  t.equal(resident(blobFile!), 4 * MIB, 'the range read is dropped, its first and last partial pages included; the file\'s second half stays')
  dropper.dropStoreReadahead()
  t.equal(resident(blobFile!), 0, 'dropStoreReadahead drops the rest of a file read')
  t.equal(dropper.stats.storeBytesDropped, to - from)

  const chunks = Array.from({ length: 64 }, () => randomBytes(64 * 1024))
  for (const c of chunks) await cache.put(sha(c), c)
  await cache.flushWrites()
  await dropper.idle()
  t.ok(dropper.stats.cacheFileDrops >= 1, 'a commit led to a drop')
  t.ok(resident(cache.mapFile) < MIB, `data.mdb left the page cache (${resident(cache.mapFile)} bytes resident, 4 MiB written)`)
  t.ok(chunks.every(c => cache.get(sha(c))?.equals(c) === true), 'every chunk reads back, byte for byte')
  t.same(lines, [], 'nothing failed')
})

t.test('`PageCopyDropper` turns a store file\'s readahead off while active, and back on once inactive', async t => {
  let active = true
  const { dropper, store, storeDir, lines } = await setup(t, () => active)
  const { blob, blobFile } = await uncachedBlob(store, storeDir)
  const KIB64 = 64 * 1024
  t.equal(resident(blobFile!), 0, 'the blob just written is out of the page cache')
  const settled = async (): Promise<number> => { await new Promise(resolve => setTimeout(resolve, 100)); return resident(blobFile!) }
  // The file's first read, at its start, and the next range right after it (sequential): the kernel would read far ahead of both.
  t.ok((await store.getRange('blobs/one', 0, KIB64)).equals(blob.subarray(0, KIB64)), 'the first range reads back')
  t.equal(await settled(), 0, 'while active the file\'s first read brings in only its own range (then dropped): nothing read ahead')
  t.ok((await store.getRange('blobs/one', KIB64, KIB64)).equals(blob.subarray(KIB64, 2 * KIB64)), 'the range reads back')
  t.equal(await settled(), 0, 'nor the next, sequential one')
  dropper.dropStoreReadahead()
  active = false
  await store.getRange('blobs/one', 2 * KIB64, KIB64)
  t.ok((await store.getRange('blobs/one', 3 * KIB64, KIB64)).equals(blob.subarray(3 * KIB64, 4 * KIB64)), 'the range reads back')
  const ahead = await settled()
  t.ok(ahead > 2 * KIB64, `once inactive the kernel reads ahead again (${ahead} bytes resident after reading ${2 * KIB64})`)
  t.same(lines, [], 'nothing failed')
})

t.test('`PageCopyDropper` inactive drops nothing', async t => {
  const { dropper, cache, store, storeDir } = await setup(t, false)
  const blob = randomBytes(4 * MIB)
  await store.put('blobs/one', blob)
  const [blobFile] = filesUnder(storeDir)
  await store.getRange('blobs/one', 0, 4 * MIB)
  t.ok(resident(blobFile!) >= 4 * MIB, 'the store file stays in the page cache')
  const chunks = Array.from({ length: 32 }, () => randomBytes(64 * 1024))
  for (const c of chunks) await cache.put(sha(c), c)
  await cache.flushWrites()
  await dropper.idle()
  t.ok(resident(cache.mapFile) >= MIB, 'data.mdb stays in the page cache')
  t.same(dropper.stats, { storeReadsDropped: 0, storeBytesDropped: 0, cacheFileDrops: 0 })
})

t.test('`PageCopyDropper.dropStoreReadahead()` drops the readahead of store reads made before it became active', async t => {
  let active = false
  const { dropper, store, storeDir, lines } = await setup(t, () => active)
  const { blobFile } = await uncachedBlob(store, storeDir)
  const KIB64 = 64 * 1024
  // Inactive (under the target): the kernel reads ahead, and nothing is dropped.
  for (let i = 0; i < 4; i++) await store.getRange('blobs/one', i * KIB64, KIB64)
  await new Promise(resolve => setTimeout(resolve, 100))
  const ahead = resident(blobFile!)
  t.ok(ahead > 4 * KIB64, `inactive: read ahead (${ahead} bytes resident after reading ${4 * KIB64})`)
  // Use crosses the target; the next settle drops what was read before too (the reclaimer's settle calls this).
  active = true
  dropper.dropStoreReadahead()
  t.equal(resident(blobFile!), 0, 'the readahead of the reads made while inactive is gone')
  t.same(lines, [], 'nothing failed')
})

t.test('`PageCopyDropper.dropWrittenNow()` flushes and drops the pages commits wrote without their wait', async t => {
  const { dropper, cache, lines } = await setup(t, true, 60_000)
  const chunks = Array.from({ length: 64 }, () => randomBytes(64 * 1024))
  for (const c of chunks) await cache.put(sha(c), c)
  await cache.flushWrites()
  t.ok(resident(cache.mapFile) >= 2 * MIB, `the commit's pages are in the page cache (${resident(cache.mapFile)} bytes), their drop waits 60 s`)
  t.equal(dropper.stats.cacheFileDrops, 0, 'no drop yet')
  const started = performance.now()
  await dropper.dropWrittenNow()
  t.ok(performance.now() - started < 10_000, 'without the wait')
  t.equal(dropper.stats.cacheFileDrops, 1, 'one drop')
  t.ok(resident(cache.mapFile) < MIB, `data.mdb left the page cache (${resident(cache.mapFile)} bytes resident, 4 MiB written)`)
  t.ok(chunks.every(c => cache.get(sha(c))?.equals(c) === true), 'every chunk reads back, byte for byte')
  await dropper.dropWrittenNow()
  t.equal(dropper.stats.cacheFileDrops, 1, 'nothing written since: no other drop')
  await dropper.idle()
  t.same(lines, [], 'nothing failed')
})
