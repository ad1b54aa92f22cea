// Real FUSE mounts over the daemon's read path: MountChunkReader (with its
// blob-neighbour readahead) over ChunkFetcher + MemoryChunkCache +
// MemoryObjectStore holding zstd blobs. Async fs calls only (the ops are
// answered on this event loop).
import t, { type Test } from 'tap'
import { lstat, readFile, readdir, rm, rmdir } from 'node:fs/promises'
import { join } from 'node:path'
import { compress } from 'zstd-napi'
import { ChunkFetcher } from '../../cache/chunk-fetcher.js'
import { MemoryChunkCache } from '../../cache/memory-chunk-cache.js'
import type { PutOptions } from '../../cache/chunk-cache.js'
import { StoreUnavailableError } from '../../errors.js'
import { blobKey } from '../../format/keys.js'
import { MemoryObjectStore } from '../../store/memory-object-store.js'
import { mountImage, type ImageMount } from '../../fs/image-mount.js'
import { MemoryImage, patternBytes } from '../../fs/memory-image.js'
import { BlobNeighbours } from './blob-neighbours.js'
import { MountChunkReader } from './mount-chunk-reader.js'

const CHUNK_32KIB = 32 * 1024

/** A store that records every range GET and can be made to fail. */
class RecordingStore {
  readonly inner = new MemoryObjectStore('fs-fetcher-test')
  readonly url = this.inner.url
  readonly remote = false
  readonly gets: Array<{ key: string, offset: number, length: number }> = []
  failWith: Error | undefined

  async getRange (key: string, offset: number, length: number): Promise<Buffer> {
    this.gets.push({ key, offset, length })
    if (this.failWith !== undefined) throw this.failWith
    return await this.inner.getRange(key, offset, length)
  }
}

/** A real memory cache that counts inserts per chunk: a chunk fetched twice is inserted twice. */
class CountingCache extends MemoryChunkCache {
  readonly inserts = new Map<string, number>()
  override async put (digest: string, plain: Uint8Array, options?: PutOptions): Promise<void> {
    this.inserts.set(digest, (this.inserts.get(digest) ?? 0) + 1)
    return await super.put(digest, plain, options)
  }
}

async function setup (t: Test): Promise<{ image: MemoryImage, files: Map<string, Buffer>, store: RecordingStore, cache: CountingCache, fetcher: ChunkFetcher }> {
  const image = new MemoryImage({ compress: plain => compress(Buffer.from(plain)) })
  const files = new Map<string, Buffer>()
  const entries = []
  for (let i = 0; i < 40; i++) {
    // Compressible content (runs of one byte) so stored bytes differ from plain bytes.
    const data = Buffer.concat([patternBytes(1000 + i * 3000, i + 1), Buffer.alloc(2000 + i * 500, i)])
    files.set(`d${i % 4}/f${i}`, data)
    entries.push({ path: `d${i % 4}/f${i}`, type: 'file' as const, content: data, mode: 0o640, uid: i, gid: 7, mtime: 1_600_000_000 + i })
  }
  image.addLayer(entries, { chunkSize: CHUNK_32KIB, stream: true })
  const store = new RecordingStore()
  for (const [hex, bytes] of image.blobs) await store.inner.put(blobKey(hex), bytes)
  const cache = new CountingCache({ maintenanceIntervalMs: 0 })
  const fetcher = new ChunkFetcher(store, cache, { fetchTimeoutMs: 5000 })
  t.teardown(async () => { await fetcher.close(); await cache.close() })
  return { image, files, store, cache, fetcher }
}

let mountpoints = 0
async function mount (t: Test, image: MemoryImage, fetcher: ChunkFetcher, cache: CountingCache, log: string[] = []): Promise<{ m: ImageMount, dir: string }> {
  const dir = join(t.testdirName, `mnt-${++mountpoints}`)
  let m: ImageMount | undefined
  t.teardown(async () => {
    await m?.unmount()
    await rm(dir, { recursive: true, force: true })
    await rmdir(t.testdirName).catch(() => {})
  })
  const reader = new MountChunkReader(fetcher, 'memory://fs-fetcher-test', {
    onPrefetchError: err => log.push(`prefetch: ${(err as Error).message}`),
    neighbours: () => new BlobNeighbours(image.tocs),
    isCached: digest => cache.has(digest)
  })
  m = await mountImage({ mountpoint: dir, tocs: image.tocs, reader, log: l => log.push(l) })
  return { m, dir }
}

t.test('MountChunkReader: a cold mount serves every file and attribute; a second mount fetches 0 bytes', async t => {
  const { image, files, store, cache, fetcher } = await setup(t)
  const cold = await mount(t, image, fetcher, cache)
  for (const [path, data] of files) {
    t.ok((await readFile(join(cold.dir, path))).equals(data), `content of ${path}`)
    const st = await lstat(join(cold.dir, path))
    const i = Number(path.split('/f')[1])
    t.same([st.size, st.mode & 0o7777, st.uid, st.gid, st.mtimeMs], [data.length, 0o640, i, 7, (1_600_000_000 + i) * 1000], `attributes of ${path}`)
  }
  t.same((await readdir(join(cold.dir, 'd0'))).length, 10)
  const s = cold.m.stats()
  t.ok(s.fetchedBytes > 0, 'fetched from the store')
  t.ok(s.fetchedBytes <= s.storedBytes, 'never more than the stored bytes')
  t.ok(s.storedBytes < s.imageBytes, 'stored bytes are compressed')
  t.equal(s.imageBytes, [...files.values()].reduce((n, d) => n + d.length, 0))
  await fetcher.idle()
  const getsAfterCold = store.gets.length

  const warm = await mount(t, image, fetcher, cache)
  for (const [path, data] of files) t.ok((await readFile(join(warm.dir, path))).equals(data), `warm content of ${path}`)
  t.equal(warm.m.stats().fetchedBytes, 0, 'a warm cache fetches nothing')
  t.equal(warm.m.stats().fetchReads, 0, 'every read answered synchronously')
  t.equal(store.gets.length, getsAfterCold, 'no GET at all')
})

t.test('MountChunkReader: 16 concurrent readers of overlapping files get correct bytes, each chunk fetched once', async t => {
  const { image, files, cache, fetcher } = await setup(t)
  const { dir } = await mount(t, image, fetcher, cache)
  const paths = [...files.keys()]
  const readers = Array.from({ length: 16 }, async (_, r) => {
    // Each reader reads a window of files, overlapping its neighbours'.
    for (let k = 0; k < 12; k++) {
      const path = paths[(r * 2 + k) % paths.length]!
      const got = await readFile(join(dir, path))
      if (!got.equals(files.get(path)!)) throw new Error(`reader ${r}: wrong bytes for ${path}`)
    }
  })
  await Promise.all(readers)
  t.pass('all readers got correct bytes')
  await fetcher.idle()
  t.equal(cache.inserts.size, image.tocs[0]!.chunks.length, 'every chunk was fetched')
  t.same([...cache.inserts.values()].filter(n => n !== 1), [], 'and none twice')
})

t.test('MountChunkReader: the store going away mid-read gives EIO and a log line naming chunk and store', async t => {
  const { image, files, store, cache, fetcher } = await setup(t)
  const log: string[] = []
  const { dir, m } = await mount(t, image, fetcher, cache, log)
  const [first, ...rest] = [...files.keys()]
  t.ok((await readFile(join(dir, first!))).equals(files.get(first!)!))
  await fetcher.idle()
  store.failWith = new StoreUnavailableError('connect ECONNREFUSED 127.0.0.1:9000')
  const last = rest.at(-1)!
  await t.rejects(readFile(join(dir, last)), { code: 'EIO' })
  t.match(log.join('\n'), /EIO: read ".*f39".*chunks sha256:[0-9a-f]{12}.*store memory:\/\/fs-fetcher-test unavailable: cannot fetch chunk [0-9a-f]{64}/)
  t.ok(m.stats().ioErrors >= 1)
  store.failWith = undefined
  t.ok((await readFile(join(dir, last))).equals(files.get(last)!), 'reads work again once the store is back')
})
