import t, { type Test } from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { compress } from 'zstd-napi'
import { CorruptObjectError, InternalError, NotFoundError, StoreUnavailableError, UsageError } from '../errors.js'
import { blobKey } from '../format/keys.js'
import type { ChunkRef } from '../format/toc.js'
import { MemoryObjectStore } from '../store/memory-object-store.js'
import type { ObjectStore } from '../store/object-store.js'
import { ChunkFetcher, newFetchStats, type ChunkFetcherOptions } from './chunk-fetcher.js'
import { LmdbChunkCache } from './lmdb-chunk-cache.js'
import { MemoryChunkCache } from './memory-chunk-cache.js'

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

/** A real MemoryObjectStore with a record of every range GET, and faults on demand. */
class CountingStore implements Pick<ObjectStore, 'getRange' | 'url' | 'remote'> {
  readonly inner = new MemoryObjectStore('fetcher-test')
  readonly url = this.inner.url
  readonly remote = false
  readonly calls: Array<{ key: string, offset: number, length: number }> = []
  delayMs = 0
  failWith: Error | undefined
  hang = false

  async getRange (key: string, offset: number, length: number): Promise<Buffer> {
    this.calls.push({ key, offset, length })
    if (this.delayMs > 0) await sleep(this.delayMs)
    if (this.hang) return await new Promise<Buffer>(() => {})
    if (this.failWith !== undefined) throw this.failWith
    return await this.inner.getRange(key, offset, length)
  }

  /** GETs whose range covers all of `ref`. */
  coverage (ref: ChunkRef): number {
    return this.calls.filter(c => c.key === blobKey(ref.blob) && c.offset <= ref.offset &&
      c.offset + c.length >= ref.offset + ref.compressedLength).length
  }
}

interface Packed { refs: ChunkRef[], plains: Buffer[], blob: string, bytes: Buffer }

/** Pack chunks into one blob (zstd frames back to back, `gapBytes` of filler between them) and store it. */
async function packBlob (store: CountingStore, plains: Buffer[], gapBytes = 0): Promise<Packed> {
  const parts: Buffer[] = []
  const spans: Array<{ offset: number, compressedLength: number }> = []
  let pos = 0
  for (const p of plains) {
    const frame = compress(p)
    spans.push({ offset: pos, compressedLength: frame.length })
    parts.push(frame, Buffer.alloc(gapBytes, 0xee))
    pos += frame.length + gapBytes
  }
  const bytes = Buffer.concat(parts)
  const blob = sha(bytes)
  await store.inner.put(blobKey(blob), bytes)
  const refs = plains.map((p, i) => ({ digest: sha(p), blob, length: p.length, ...spans[i]! }))
  return { refs, plains, blob, bytes }
}

/** Chunks that compress a little, like real files. */
function plainChunks (n: number, size = 16 * 1024): Buffer[] {
  return Array.from({ length: n }, () => {
    const b = randomBytes(size)
    b.fill(0, 0, size / 4)
    return b
  })
}

function setup (t: Test, options: ChunkFetcherOptions = {}): { store: CountingStore, cache: MemoryChunkCache, fetcher: ChunkFetcher } {
  const store = new CountingStore()
  const cache = new MemoryChunkCache({ maintenanceIntervalMs: 0 })
  const fetcher = new ChunkFetcher(store, cache, options)
  t.teardown(async () => { await fetcher.close(); await cache.close() })
  return { store, cache, fetcher }
}

t.test('ChunkFetcher.read() returns each chunk\'s plain bytes, then serves them from the cache', async t => {
  const { store, cache, fetcher } = setup(t)
  const { refs, plains, bytes } = await packBlob(store, plainChunks(5))
  const mount = newFetchStats()
  const got = await fetcher.read([refs[3]!, refs[0]!, refs[3]!], { stats: mount })
  t.ok(got[0]!.equals(plains[3]!) && got[1]!.equals(plains[0]!) && got[2]!.equals(plains[3]!), 'bytes in request order')
  t.equal(store.calls.length, 1, 'one GET')
  t.ok(cache.has(refs[0]!.digest) && cache.has(refs[3]!.digest), 'verified chunks cached')
  t.match(mount, { hits: 0, misses: 3, fetches: 1 })
  t.equal(mount.fetchedBytes, store.calls[0]!.length, 'fetchedBytes counts the compressed bytes of the GET')
  t.ok(mount.fetchedBytes < bytes.length, 'only the range needed')
  const again = await fetcher.read(refs.slice(0, 1).concat(refs[3]!), { stats: mount })
  t.ok(again[0]!.equals(plains[0]!) && again[1]!.equals(plains[3]!))
  t.equal(store.calls.length, 1, 'hits fetch nothing')
  t.match(mount, { hits: 2, misses: 3, fetches: 1 })
  t.match(fetcher.stats, { hits: 2, misses: 3, fetches: 1, corruptChunks: 0 }, 'node-wide counters too')
  const view = fetcher.getCached(refs[0]!.digest, mount)
  t.ok(view?.equals(plains[0]!), 'getCached() is the sync hit path')
  t.equal(mount.hits, 3)
  t.equal(fetcher.getCached(refs[1]!.digest, mount), undefined)
  t.equal(mount.misses, 3, 'getCached() counts no miss')
})

t.test('ChunkFetcher.read() by 16 concurrent readers of overlapping chunks fetches each chunk once', async t => {
  const { store, fetcher } = setup(t)
  store.delayMs = 5
  const a = await packBlob(store, plainChunks(24))
  const b = await packBlob(store, plainChunks(24))
  const refs = [...a.refs, ...b.refs]
  const plains = [...a.plains, ...b.plains]
  const readers = Array.from({ length: 16 }, async (_, r) => {
    // Reader r wants a window of 12 chunks starting at 3r: neighbours overlap by 9.
    await sleep(r % 4) // arrive over several event-loop turns
    const idx = Array.from({ length: 12 }, (_, k) => (3 * r + k) % refs.length)
    const got = await fetcher.read(idx.map(i => refs[i]!))
    return idx.every((i, k) => got[k]!.equals(plains[i]!))
  })
  t.same(await Promise.all(readers), Array(16).fill(true), 'every reader got correct bytes')
  const counts = refs.map(r => store.coverage(r))
  t.same(counts, Array(refs.length).fill(1), 'every chunk covered by exactly one GET')
  await fetcher.idle()
  t.equal(fetcher.inflight, 0, 'nothing left in flight once the cache writes finished')
  t.ok(fetcher.stats.misses >= refs.length, 'misses include joined fetches')
  t.equal(fetcher.stats.fetchedBytes, store.calls.reduce((n, c) => n + c.length, 0))
})

t.test('ChunkFetcher.read() merges adjacent misses into one range GET, bounded in size', async t => {
  const { store, fetcher } = setup(t, { maxGapBytes: 1024, maxRangeBytes: 64 * 1024 })
  const tight = await packBlob(store, plainChunks(6, 4096))
  await fetcher.read(tight.refs)
  t.same(store.calls, [{ key: blobKey(tight.blob), offset: 0, length: tight.bytes.length }], 'six contiguous chunks: one GET of the run')

  store.calls.length = 0
  const gappy = await packBlob(store, plainChunks(4, 4096), 512)
  await fetcher.read(gappy.refs)
  t.equal(store.calls.length, 1, 'gaps of 512 bytes are read through')

  store.calls.length = 0
  const apart = await packBlob(store, plainChunks(3, 4096), 512)
  await fetcher.read([apart.refs[0]!, apart.refs[2]!])
  t.equal(store.calls.length, 2, 'a gap of a whole chunk plus filler (> 1 KiB) is not')
  t.equal(store.coverage(apart.refs[1]!), 0, 'the chunk between was not downloaded')

  store.calls.length = 0
  const many = await packBlob(store, plainChunks(16))
  await fetcher.read(many.refs)
  t.ok(store.calls.length >= 4 && store.calls.every(c => c.length <= 64 * 1024), `split into ${store.calls.length} GETs of at most 64 KiB`)
  t.same(many.refs.map(r => store.coverage(r)), Array(16).fill(1), 'each chunk in exactly one of them')
})

t.test('ChunkFetcher.read() rejects a corrupt chunk with CorruptObjectError, counts it and never caches it', async t => {
  const { store, cache, fetcher } = setup(t)
  const { refs, plains, blob, bytes } = await packBlob(store, plainChunks(3))
  // Same length, different content: frame 1 replaced by a valid frame of other bytes.
  const evil = compress(randomBytes(plains[1]!.length))
  const bad = { ...refs[1]!, compressedLength: evil.length }
  const tampered = Buffer.concat([bytes.subarray(0, refs[1]!.offset), evil, bytes.subarray(refs[2]!.offset)])
  await store.inner.put(blobKey(blob), tampered)
  const shifted = { ...refs[2]!, offset: refs[2]!.offset + evil.length - refs[1]!.compressedLength }
  const mount = newFetchStats()
  const err = await fetcher.read([refs[0]!, bad, shifted], { stats: mount }).catch(e => e)
  t.type(err, CorruptObjectError)
  t.match(err.message, bad.digest, 'names the chunk')
  t.match(err.message, blob, 'names the blob')
  t.match(err.message, store.url, 'names the store')
  t.equal(mount.corruptChunks, 1)
  t.equal(fetcher.stats.corruptChunks, 1)
  t.equal(cache.has(bad.digest), false, 'never cached')
  t.ok(cache.has(refs[0]!.digest) && cache.has(shifted.digest), 'good neighbours in the same GET are cached')
  await t.rejects(fetcher.read([bad]), CorruptObjectError, 'a second read fails again')
  t.equal(fetcher.stats.corruptChunks, 2)

  const garbage = { ...refs[0]!, digest: sha(Buffer.from('x')), offset: 0, compressedLength: 10 }
  await store.inner.put(blobKey(blob), Buffer.alloc(100, 0x42))
  await t.rejects(fetcher.read([garbage]), CorruptObjectError, 'bytes that are not zstd')
})

t.test('ChunkFetcher.read() fails fast with StoreUnavailableError when the store fails, and retries later', async t => {
  const { store, fetcher } = setup(t)
  const { refs, plains } = await packBlob(store, plainChunks(2))
  store.failWith = new StoreUnavailableError('connect ECONNREFUSED 127.0.0.1:9')
  const mount = newFetchStats()
  const started = Date.now()
  const err = await fetcher.read(refs, { stats: mount }).catch(e => e)
  t.type(err, StoreUnavailableError)
  t.ok(Date.now() - started < 5000, 'fails fast (no retries here)')
  t.match(err.message, refs[0]!.digest)
  t.match(err.message, store.url)
  t.match(err.message, 'ECONNREFUSED')
  t.equal(err.cause, store.failWith, 'cause kept')
  t.equal(mount.storeErrors, 1)
  t.equal(fetcher.inflight, 0)
  store.failWith = undefined
  const got = await fetcher.read(refs)
  t.ok(got[1]!.equals(plains[1]!), 'works again once the store is back')
})

t.test('ChunkFetcher.read() keeps the class of a store error that is not "unavailable", and reports a bug as InternalError with its stack', async t => {
  const { store, fetcher } = setup(t)
  const { refs } = await packBlob(store, plainChunks(1))
  const denied = new UsageError(`cannot getRange blobs/x in store ${store.url}: permission denied`)
  store.failWith = denied
  const err = await fetcher.read(refs).catch(e => e)
  t.type(err, UsageError)
  t.notOk(err instanceof StoreUnavailableError)
  t.match(err.message, `cannot fetch chunk ${refs[0]!.digest}`)
  t.match(err.message, 'permission denied')
  t.equal(err.cause, denied)
  const bug = new TypeError("Cannot read properties of undefined (reading 'length')")
  store.failWith = bug
  const e2 = await fetcher.read(refs).catch(e => e)
  t.type(e2, InternalError)
  t.equal(e2.code, 'ERR_INTERNAL')
  t.notOk(e2 instanceof StoreUnavailableError, 'a bug is not "store unavailable"')
  t.equal(e2.cause, bug, 'the original error, with its stack, is the cause')
  t.match(e2.cause.stack, /TypeError: Cannot read properties/)
  t.equal(fetcher.stats.storeErrors, 2, 'both GETs count as failed')
})

t.test('ChunkFetcher.read() names a missing blob with NotFoundError', async t => {
  const { store, fetcher } = setup(t)
  const { refs, blob } = await packBlob(store, plainChunks(1))
  await store.inner.delete(blobKey(blob))
  const err = await fetcher.read(refs).catch(e => e)
  t.type(err, NotFoundError)
  t.match(err.message, blob)
})

t.test('ChunkFetcher.read() gives up on a GET that never answers', async t => {
  const { store, fetcher } = setup(t, { fetchTimeoutMs: 100 })
  const { refs } = await packBlob(store, plainChunks(1))
  store.hang = true
  const started = Date.now()
  const err = await fetcher.read(refs).catch(e => e)
  t.type(err, StoreUnavailableError)
  t.match(err.message, /no answer after 100 ms/)
  t.ok(Date.now() - started < 5000, 'gave up, not hung')
})

t.test('ChunkFetcher demand reads never wait behind queued prefetch', async t => {
  const { store, fetcher } = setup(t, { demandConcurrency: 8, prefetchConcurrency: 2 })
  // 100 chunks in 100 blobs: nothing merges, so prefetch queues 100 GETs.
  const packs = await Promise.all(Array.from({ length: 101 }, async () => await packBlob(store, plainChunks(1, 4096))))
  const [demand, ...rest] = packs
  store.delayMs = 20
  const order: string[] = []
  const prefetching = fetcher.prefetch(rest.map(p => p.refs[0]!)).then(r => { order.push('prefetch'); return r })
  await sleep(30) // the first prefetch GETs are running, the rest queued
  const got = await fetcher.read(demand!.refs).then(r => { order.push('demand'); return r })
  const prefetchGetsBefore = store.calls.filter(c => c.key !== blobKey(demand!.blob)).length
  t.ok(got[0]!.equals(demand!.plains[0]!))
  // Timing-free: count how far the prefetch queue got while the demand read ran.
  t.ok(prefetchGetsBefore <= 10, `demand read done after ${prefetchGetsBefore} of 100 prefetch GETs`)
  const result = await prefetching
  t.same(order, ['demand', 'prefetch'])
  t.match(result, { requested: 100, fetched: 100, failed: 0, cached: 0 })
  t.equal(fetcher.stats.prefetchedChunks, 100)
})

t.test('ChunkFetcher.read() of a chunk queued for prefetch promotes it ahead of the prefetch queue', async t => {
  const { store, fetcher } = setup(t, { prefetchConcurrency: 1 })
  const packs = await Promise.all(Array.from({ length: 40 }, async () => await packBlob(store, plainChunks(1, 4096))))
  store.delayMs = 20
  const prefetching = fetcher.prefetch(packs.map(p => p.refs[0]!))
  await sleep(30)
  const last = packs[39]!
  const [got] = await fetcher.read(last.refs)
  const prefetchGetsBefore = store.calls.filter(c => c.key !== blobKey(last.blob)).length
  t.ok(got!.equals(last.plains[0]!))
  t.ok(prefetchGetsBefore <= 10, `served after ${prefetchGetsBefore} of the 39 GETs queued ahead of it`)
  await prefetching
  t.equal(store.calls.filter(c => c.key === blobKey(last.blob)).length, 1, 'still fetched once')
})

t.test('ChunkFetcher.prefetch() warms the cache so later reads fetch nothing', async t => {
  const { store, fetcher } = setup(t)
  const { refs, plains } = await packBlob(store, plainChunks(8))
  const mount = newFetchStats()
  const result = await fetcher.prefetch([...refs, refs[0]!], { stats: mount })
  t.match(result, { requested: 9, fetched: 8, cached: 1, failed: 0 })
  t.equal(mount.prefetchedChunks, 8)
  t.ok(mount.fetchedBytes > 0, 'prefetch bytes count for the mount that asked')
  const calls = store.calls.length
  const got = await fetcher.read(refs, { stats: mount })
  t.ok(got.every((b, i) => b.equals(plains[i]!)))
  t.equal(store.calls.length, calls, 'no GET after prefetch')
  t.equal(mount.hits, 8)
  t.match(await fetcher.prefetch(refs), { cached: 8, fetched: 0 })
  store.failWith = new StoreUnavailableError('down')
  const other = await packBlob(store, plainChunks(2))
  t.match(await fetcher.prefetch(other.refs), { fetched: 0, failed: 2 }, 'failures are counted, not thrown')
})

t.test('ChunkFetcher.close() fails queued fetches with UsageError and is idempotent', async t => {
  const { store, fetcher } = setup(t, { demandConcurrency: 1 })
  const packs = await Promise.all(Array.from({ length: 3 }, async () => await packBlob(store, plainChunks(1, 4096))))
  store.delayMs = 30
  const reads = packs.map(async p => await fetcher.read(p.refs).then(() => 'ok', (e: Error) => e))
  await sleep(10)
  await Promise.all([fetcher.close(), fetcher.close()])
  const results = await Promise.all(reads)
  t.equal(results[0], 'ok', 'the running fetch finished')
  t.type(results[1], UsageError)
  t.type(results[2], UsageError)
  await t.rejects(fetcher.read(packs[0]!.refs), UsageError)
})

t.test('ChunkFetcher over an LmdbChunkCache fetches nothing after a restart with a warm cache', async t => {
  const dir = t.testdir()
  const store = new CountingStore()
  const { refs, plains } = await packBlob(store, plainChunks(10))
  const first = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0 })
  const f1 = new ChunkFetcher(store, first)
  await f1.read(refs)
  await f1.close()
  await first.close()
  t.ok(store.calls.length > 0)
  const fetched = store.calls.length

  const second = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0 })
  const f2 = new ChunkFetcher(store, second)
  t.teardown(async () => { await f2.close(); await second.close() })
  const mount = newFetchStats()
  const got = await f2.read(refs, { stats: mount })
  t.ok(got.every((b, i) => b.equals(plains[i]!)))
  t.equal(store.calls.length, fetched, 'no GET')
  t.match(mount, { fetchedBytes: 0, hits: 10, misses: 0 })
})

t.test('ChunkFetcher.readInto() answers a fully cached read synchronously and fetches only what is missing', async t => {
  const { store, fetcher } = setup(t)
  const { refs, plains } = await packBlob(store, plainChunks(4, 8192))
  const pieces = [
    { ref: refs[0]!, offset: 8000, length: 192 },
    { ref: refs[1]!, offset: 0, length: 8192 },
    { ref: refs[2]!, offset: 0, length: 100 }
  ]
  const expected = Buffer.concat([plains[0]!.subarray(8000), plains[1]!, plains[2]!.subarray(0, 100)])
  const mount = newFetchStats()
  const target = Buffer.alloc(9000)
  const first = fetcher.readInto(pieces, target, { stats: mount })
  t.type(first, Promise, 'misses: a promise')
  t.equal(await first, expected.length)
  t.ok(target.subarray(0, expected.length).equals(expected))
  target.fill(0)
  const second = fetcher.readInto(pieces, target, { stats: mount })
  t.equal(second, expected.length, 'all cached: a number, no promise')
  t.ok(target.subarray(0, expected.length).equals(expected))
  t.match(mount, { hits: 3, misses: 3, fetches: 1 })
  await fetcher.read([refs[3]!])
  t.throws(() => fetcher.readInto([{ ref: refs[0]!, offset: 8000, length: 193 }], target), RangeError, 'outside the chunk')
  t.throws(() => fetcher.readInto(pieces, Buffer.alloc(10)), RangeError, 'target too small')
})
