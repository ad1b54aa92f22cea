import t from 'tap'
import { open } from 'lmdb'
import { join } from 'node:path'
import { UnsupportedError } from '../errors.js'
import {
  makeChunk, runChunkCacheConformance, runPersistenceConformance, tickingClock, type CacheFactory
} from './chunk-cache.conformance.js'
import { LmdbChunkCache } from './lmdb-chunk-cache.js'

const factory: CacheFactory = (tt, options = {}) => {
  const dir = join(tt.testdir(), 'cache')
  const cache = LmdbChunkCache.open(dir, options)
  return {
    cache,
    reopen: async (o = {}) => {
      await cache.close()
      return LmdbChunkCache.open(dir, o)
    }
  }
}

runChunkCacheConformance(t, 'LmdbChunkCache', factory)
runPersistenceConformance(t, 'LmdbChunkCache', factory)

t.test('LmdbChunkCache.open() repairs an index that lost step with the data', async t => {
  const dir = join(t.testdir(), 'cache')
  const clock = tickingClock()
  const opts = { clock, maintenanceIntervalMs: 0, capBytes: 10_000, lowWatermark: 0.3 }
  const kept = makeChunk(3000)
  const dropped = makeChunk(2000)
  const orphan = makeChunk(1000)
  const first = LmdbChunkCache.open(dir, opts)
  await first.put(kept.digest, kept.bytes)
  await first.put(dropped.digest, dropped.bytes)
  await first.close()
  // Damage the cache the way a foreign writer (or a future bug) could:
  // data without index rows, and index rows without data.
  const tamper = async (fn: (chunks: ReturnType<ReturnType<typeof open>['openDB']>) => Promise<unknown>): Promise<void> => {
    const env = open({ path: dir, noSubdir: false, maxDbs: 8 })
    await fn(env.openDB({ name: 'chunks', encoding: 'binary' }))
    await env.close()
  }
  await tamper(async chunks => await chunks.put(orphan.digest, orphan.bytes))
  const second = LmdbChunkCache.open(dir, opts)
  t.match(second.stats(), { chunks: 3, bytes: 6000 }, 'orphan counted')
  t.equal([...second.coldest()][0]?.key, orphan.digest, 'the orphan is indexed as the coldest entry')
  await second.close()

  await tamper(async chunks => await chunks.remove(dropped.digest))
  const third = LmdbChunkCache.open(dir, opts)
  t.teardown(() => third.close())
  t.match(third.stats(), { chunks: 2, bytes: 4000 }, 'counters recounted from the data')
  t.equal(third.has(dropped.digest), false, 'index row without data dropped')
  t.same([...third.coldest()].map(e => e.key), [orphan.digest, kept.digest], 'index matches the data')
  t.ok(third.get(orphan.digest)?.equals(orphan.bytes), 'orphan chunk served')
  await third.reclaim()
  t.equal(third.stats().bytes, 1000, 'reclaim to the low watermark evicts the coldest')
  t.equal(third.has(orphan.digest), true, 'the orphan was read since: it stays')
})

t.test('LmdbChunkCache.open() refuses a cache written in another format', async t => {
  const dir = join(t.testdir(), 'cache')
  const env = open({ path: dir, noSubdir: false, maxDbs: 8 })
  await env.openDB({ name: 'info' }).put('format', 99)
  await env.close()
  t.throws(() => LmdbChunkCache.open(dir), UnsupportedError)
})
