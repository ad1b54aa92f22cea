/**
 * The ChunkCache conformance suite: one set of behaviours every backend must
 * show (lmdb-chunk-cache.test.ts and memory-chunk-cache.test.ts run it).
 * Covers get/has/put/delete, insert-time checks, metadata and pins, stats,
 * close, and the quota: cap, watermarks, LRU order, pinned never evicted,
 * proactive reclaim. Persistence across reopen runs when the backend has it.
 *
 * May import: src/errors.ts, src/format/, ./ (the cache under test), tap, zstd-napi.
 */
import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import { Compressor } from 'zstd-napi'
import { CorruptObjectError, UsageError } from '../errors.js'
import { sha256Hex } from '../format/digest.js'
import type { CacheQuotaOptions } from './cache-quota.js'
import type { ChunkCache } from './chunk-cache.js'

export interface CacheUnderTest {
  cache: ChunkCache
  /** Close `cache` and open the same storage again (persistent backends only). */
  reopen?: (options?: CacheQuotaOptions) => Promise<ChunkCache>
}

/** Opens a fresh, empty cache; the suite closes it. */
export type CacheFactory = (t: Test, options?: CacheQuotaOptions) => CacheUnderTest

export interface Chunk { digest: string, bytes: Buffer }

export function makeChunk (size = 1000): Chunk {
  const bytes = randomBytes(size)
  return { digest: sha256Hex(bytes), bytes }
}

export function makeMeta (prefix = 'layers', size = 300): { key: string, bytes: Buffer } {
  const bytes = randomBytes(size)
  return { key: `${prefix}/${sha256Hex(bytes)}`, bytes }
}

/** A clock that advances 1 ms per reading, so recency order is exact. */
export function tickingClock (start = 1_000_000): () => number {
  let now = start
  return () => ++now
}

export async function waitFor (t: Test, what: string, cond: () => boolean, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs
  while (!cond()) {
    if (Date.now() > until) { t.fail(`timed out waiting for ${what}`); return }
    await new Promise(resolve => setTimeout(resolve, 5))
  }
}

/** Quota options for tests: exact clock, no background timer unless asked. */
const quota = (o: CacheQuotaOptions = {}): CacheQuotaOptions => ({ maintenanceIntervalMs: 0, clock: tickingClock(), ...o })

export function runChunkCacheConformance (t: Test, name: string, factory: CacheFactory): void {
  const open = (tt: Test, o?: CacheQuotaOptions): CacheUnderTest => {
    const u = factory(tt, quota(o))
    tt.teardown(() => u.cache.close())
    return u
  }

  t.test(`${name}.get() returns plain bytes for a chunk put() with its frame`, async t => {
    const { cache } = open(t)
    const plain = Buffer.alloc(70_000, 'layerd frames ')
    const digest = sha256Hex(plain)
    const frame = new Compressor().compress(plain)
    await cache.put(digest, plain, { frame })
    frame.fill(0)
    t.ok(cache.get(digest)?.equals(plain), 'the plain bytes, even after the caller reused the frame buffer')
    t.ok(cache.stats().bytes <= plain.length, 'stored size counted, never more than the plain bytes')
    await cache.delete(digest)
    t.equal(cache.get(digest), undefined, 'deleted')
  })

  t.test(`${name}.get() returns the bytes put() stored, has() and delete() agree`, async t => {
    const { cache } = open(t)
    const a = makeChunk(70_000)
    const b = makeChunk(10)
    t.equal(cache.get(a.digest), undefined, 'miss before put')
    t.equal(cache.has(a.digest), false)
    await cache.put(a.digest, a.bytes)
    await cache.put(b.digest, b.bytes)
    t.equal(cache.has(a.digest), true)
    const view = cache.get(a.digest)
    t.ok(view !== undefined && view.equals(a.bytes), 'hit returns the plain bytes')
    t.ok(cache.get(b.digest)?.equals(b.bytes), 'a second get returns its own bytes')
    await cache.delete(a.digest)
    t.equal(cache.has(a.digest), false, 'deleted')
    t.equal(cache.get(a.digest), undefined)
    await cache.delete(a.digest)
    t.pass('deleting a missing chunk is not an error')
    t.ok(cache.get(b.digest)?.equals(b.bytes), 'other chunk untouched')
  })

  t.test(`${name}.put() refuses bytes that do not hash to the digest`, async t => {
    const { cache } = open(t)
    const a = makeChunk()
    const wrong = Buffer.from(a.bytes)
    wrong[0] = wrong[0]! ^ 1
    await t.rejects(cache.put(a.digest, wrong), CorruptObjectError)
    t.equal(cache.has(a.digest), false, 'nothing stored')
    t.equal(cache.stats().bytes, 0)
    await t.rejects(cache.put('not-a-digest', a.bytes), UsageError)
    await t.rejects(cache.put(a.digest.toUpperCase(), a.bytes), UsageError)
  })

  t.test(`${name}.put() of one chunk twice stores it once`, async t => {
    const { cache } = open(t)
    const a = makeChunk(5000)
    await Promise.all([cache.put(a.digest, a.bytes), cache.put(a.digest, a.bytes)])
    await cache.put(a.digest, a.bytes)
    const s = cache.stats()
    t.equal(s.chunks, 1)
    t.equal(s.bytes, 5000)
  })

  t.test(`${name}.put() does not keep a reference the caller can change`, async t => {
    const { cache } = open(t)
    const a = makeChunk(4096)
    const mine = Buffer.from(a.bytes)
    await cache.put(a.digest, mine)
    mine.fill(0)
    t.ok(cache.get(a.digest)?.equals(a.bytes), 'cached bytes unchanged after the caller reuses its buffer')
  })

  t.test(`${name}.getMeta() returns stored metadata as an owned copy`, async t => {
    const { cache } = open(t)
    const m = makeMeta('manifests')
    t.equal(cache.getMeta(m.key), undefined)
    await cache.putMeta(m.key, m.bytes)
    const got = cache.getMeta(m.key)
    t.ok(got?.equals(m.bytes))
    got!.fill(0)
    t.ok(cache.getMeta(m.key)?.equals(m.bytes), 'changing the result does not change the cache')
    t.equal(cache.has(sha256Hex(m.bytes)), false, 'metadata is not a chunk')
    await t.rejects(cache.putMeta('layers/xyz', m.bytes), UsageError)
    await t.rejects(cache.putMeta(`layers/${sha256Hex(Buffer.from('other'))}`, m.bytes), CorruptObjectError)
    const s = cache.stats()
    t.equal(s.metaObjects, 1)
    t.equal(s.metaBytes, m.bytes.length)
    t.equal(s.chunks, 0)
  })

  t.test(`${name}.stats() counts bytes, entries, hits and misses`, async t => {
    const { cache } = open(t)
    const a = makeChunk(1000)
    const b = makeChunk(2000)
    const m = makeMeta('layers', 100)
    await cache.put(a.digest, a.bytes)
    await cache.put(b.digest, b.bytes)
    await cache.putMeta(m.key, m.bytes, { pinned: true })
    cache.get(a.digest)
    cache.get(a.digest)
    cache.get(makeChunk().digest)
    cache.getMeta(m.key)
    const s = cache.stats()
    t.match(s, { bytes: 3100, chunks: 2, metaBytes: 100, metaObjects: 1, pinned: 1, hits: 3, misses: 1, evictions: 0, rejected: 0 })
    t.ok(s.diskBytes >= s.bytes, 'disk footprint at least the bytes held')
    cache.unpin([m.key])
    t.equal(cache.stats().pinned, 0)
  })

  t.test(`${name}.close() is idempotent and later calls throw UsageError`, async t => {
    const { cache } = factory(t, quota())
    const a = makeChunk()
    await cache.put(a.digest, a.bytes)
    await Promise.all([cache.close(), cache.close()])
    await cache.close()
    t.throws(() => cache.get(a.digest), UsageError)
    t.throws(() => cache.has(a.digest), UsageError)
    await t.rejects(cache.put(a.digest, a.bytes), UsageError)
  })

  t.test(`${name} keeps usage at or under the cap`, async t => {
    const { cache } = open(t, { capBytes: 10_000, highWatermark: 0.9, lowWatermark: 0.5 })
    for (let i = 0; i < 40; i++) {
      const c = makeChunk(1000)
      await cache.put(c.digest, c.bytes)
      t.ok(cache.stats().bytes <= 10_000, `after put ${i}: ${cache.stats().bytes} bytes`)
    }
    await cache.reclaim()
    const s = cache.stats()
    t.ok(s.bytes <= 5000, 'reclaim brings usage to the low watermark')
    t.ok(s.evictions >= 30, `evicted ${s.evictions}`)
    t.equal(s.chunks * 1000, s.bytes, 'counts match bytes')
  })

  t.test(`${name} evicts above the high watermark down to the low one, least recently used first`, async t => {
    const { cache } = open(t, { capBytes: 10_000, highWatermark: 0.9, lowWatermark: 0.5 })
    const chunks = Array.from({ length: 10 }, () => makeChunk(1000))
    for (const c of chunks.slice(0, 9)) await cache.put(c.digest, c.bytes)
    await new Promise(resolve => setTimeout(resolve, 20))
    t.equal(cache.stats().evictions, 0, 'at the high watermark: nothing evicted')
    cache.get(chunks[0]!.digest)
    cache.get(chunks[1]!.digest)
    await cache.put(chunks[9]!.digest, chunks[9]!.bytes)
    await waitFor(t, 'background eviction', () => cache.stats().bytes <= 5000)
    await cache.reclaim() // waits for the background pass to commit
    const kept = chunks.map((c, i) => cache.has(c.digest) ? i : -1).filter(i => i >= 0)
    t.same(kept, [0, 1, 7, 8, 9], 'the two recently read and the three newest stay')
    t.equal(cache.stats().evictions, 5)
  })

  t.test(`${name}.dropUnpinnedMeta() removes only unpinned metadata, never chunks; a dry run removes nothing`, async t => {
    const { cache } = open(t)
    const pinned = makeMeta('layers', 400)
    const loose = [makeMeta('layers', 300), makeMeta('manifests', 200)]
    const chunk = makeChunk(700)
    await cache.putMeta(pinned.key, pinned.bytes, { pinned: true })
    for (const m of loose) await cache.putMeta(m.key, m.bytes)
    await cache.put(chunk.digest, chunk.bytes)
    t.same(await cache.dropUnpinnedMeta({ dryRun: true }), { objects: 2, bytes: 500 })
    t.ok(loose.every(m => cache.getMeta(m.key) !== undefined), 'the dry run removed nothing')
    t.same(await cache.dropUnpinnedMeta(), { objects: 2, bytes: 500 })
    t.ok(loose.every(m => cache.getMeta(m.key) === undefined), 'unpinned objects gone')
    t.ok(cache.getMeta(pinned.key)?.equals(pinned.bytes), 'the pinned one kept')
    t.ok(cache.get(chunk.digest)?.equals(chunk.bytes), 'chunks untouched')
    t.match(cache.stats(), { metaObjects: 1, metaBytes: 400, chunks: 1 })
    t.same(await cache.dropUnpinnedMeta(), { objects: 0, bytes: 0 })
  })

  t.test(`${name} never evicts pinned metadata`, async t => {
    const { cache } = open(t, { capBytes: 5000, highWatermark: 0.8, lowWatermark: 0.4 })
    const pinned = makeMeta('layers', 500)
    const loose = makeMeta('manifests', 500)
    const early = makeMeta('layers', 200)
    cache.pin([early.key]) // pinned before it is cached
    await cache.putMeta(pinned.key, pinned.bytes, { pinned: true })
    await cache.putMeta(loose.key, loose.bytes)
    await cache.putMeta(early.key, early.bytes)
    for (let i = 0; i < 20; i++) { const c = makeChunk(500); await cache.put(c.digest, c.bytes) }
    await cache.reclaim()
    t.ok(cache.getMeta(pinned.key)?.equals(pinned.bytes), 'pinned object kept')
    t.ok(cache.getMeta(early.key) !== undefined, 'object pinned before insert kept')
    t.equal(cache.getMeta(loose.key), undefined, 'unpinned object evicted like any cold entry')
    cache.pin([pinned.key])
    cache.unpin([pinned.key])
    for (let i = 0; i < 10; i++) { const c = makeChunk(500); await cache.put(c.digest, c.bytes) }
    await cache.reclaim()
    t.ok(cache.getMeta(pinned.key) !== undefined, 'one unpin of two pins: still pinned')
    cache.unpin([pinned.key, early.key])
    for (let i = 0; i < 10; i++) { const c = makeChunk(500); await cache.put(c.digest, c.bytes) }
    await cache.reclaim()
    t.equal(cache.getMeta(pinned.key), undefined, 'evictable once fully unpinned')
  })

  t.test(`${name}.put() is skipped when only pinned entries are left to evict`, async t => {
    const { cache } = open(t, { capBytes: 1000 })
    const m = makeMeta('layers', 900)
    await cache.putMeta(m.key, m.bytes, { pinned: true })
    const c = makeChunk(500)
    await cache.put(c.digest, c.bytes)
    t.equal(cache.has(c.digest), false, 'not stored')
    t.equal(cache.stats().rejected, 1)
    t.ok(cache.getMeta(m.key) !== undefined)
    const big = makeMeta('manifests', 1500)
    await cache.putMeta(big.key, big.bytes, { pinned: true })
    t.ok(cache.getMeta(big.key) !== undefined, 'pinned metadata goes in even above the cap')
  })

  t.test(`${name} reclaims down to the low watermark on its timer`, async t => {
    const { cache } = open(t, { capBytes: 10_000, highWatermark: 0.9, lowWatermark: 0.3, maintenanceIntervalMs: 20 })
    // 8,000 bytes never passes the high watermark: only the timer evicts here.
    for (let i = 0; i < 8; i++) { const c = makeChunk(1000); await cache.put(c.digest, c.bytes) }
    await waitFor(t, 'proactive reclaim', () => cache.stats().bytes <= 3000)
    await cache.reclaim() // let the timer's pass finish counting
    t.equal(cache.stats().chunks, 3)
    t.equal(cache.stats().evictions, 5)
  })
}

/** Behaviours only a persistent backend has. */
export function runPersistenceConformance (t: Test, name: string, factory: CacheFactory): void {
  t.test(`${name} keeps chunks, metadata and counters across close and reopen`, async t => {
    const u = factory(t, quota())
    const a = makeChunk(100_000)
    const m = makeMeta()
    await u.cache.put(a.digest, a.bytes)
    await u.cache.putMeta(m.key, m.bytes, { pinned: true })
    const before = u.cache.stats()
    const again = await u.reopen!(quota())
    t.teardown(() => again.close())
    t.ok(again.get(a.digest)?.equals(a.bytes), 'chunk survives')
    t.ok(again.getMeta(m.key)?.equals(m.bytes), 'metadata survives')
    t.match(again.stats(), { bytes: before.bytes, chunks: 1, metaObjects: 1, pinned: 0 }, 'counters survive; pins do not')
  })

  t.test(`${name} keeps recency across a restart`, async t => {
    const clock = tickingClock()
    const opts = { capBytes: 10_000, highWatermark: 0.9, lowWatermark: 0.5, maintenanceIntervalMs: 0, clock }
    const u = factory(t, opts)
    const chunks = Array.from({ length: 9 }, () => makeChunk(1000))
    for (const c of chunks) await u.cache.put(c.digest, c.bytes)
    u.cache.get(chunks[0]!.digest)
    u.cache.get(chunks[2]!.digest)
    const again = await u.reopen!(opts)
    t.teardown(() => again.close())
    const extra = makeChunk(1000)
    await again.put(extra.digest, extra.bytes)
    await again.reclaim()
    const kept = chunks.map((c, i) => again.has(c.digest) ? i : -1).filter(i => i >= 0)
    t.same(kept, [0, 2, 7, 8], 'hits before the restart still count as recent')
  })
}
