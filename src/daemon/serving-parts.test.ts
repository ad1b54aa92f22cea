/**
 * overTargetCacheLimits (serving-parts.ts): what the chunk cache changes as
 * use crosses the memory target. A real LmdbChunkCache in a test dir: while
 * over the target new entries go to lmdb in batches of at most 2 MiB (50 ms),
 * not the cache's own 16 MiB (250 ms); back under, the cache's own limits.
 */
import t from 'tap'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { sha256Hex } from '../format/digest.js'
import { LmdbChunkCache } from '../cache/lmdb-chunk-cache.js'
import { overTargetCacheLimits } from './serving-parts.js'

const MIB = 1024 * 1024

t.test('overTargetCacheLimits() commits new cache entries in small batches while over the target, and restores the cache\'s own limits under it', async t => {
  let commits = 0
  let committed: () => void = () => {}
  const cache = LmdbChunkCache.open(join(t.testdir(), 'cache'), { afterCommit: () => { commits++; committed() } })
  t.teardown(async () => await cache.close())
  // The write buffer's timer is unref'd: keep the loop alive while a batch waits.
  const alive = setInterval(() => {}, 1000)
  t.teardown(() => clearInterval(alive))
  const own = cache.writeBatch
  t.same(own, { delayMs: 250, maxBytes: 16 * MIB }, 'the cache\'s own limits')
  /** Put 3 MiB of new chunks (12 of 256 KiB) at once. */
  const put3MiB = async (): Promise<void> => {
    await Promise.all(Array.from({ length: 12 }, async () => {
      const plain = randomBytes(256 * 1024)
      await cache.put(sha256Hex(plain), plain)
    }))
  }
  const crossed = overTargetCacheLimits(cache)
  crossed(true)
  t.same(cache.writeBatch, { delayMs: 50, maxBytes: 2 * MIB }, 'over the target: 50 ms or 2 MiB')
  t.equal(cache.decodedCacheBytes, 4 * MIB, 'and 4 MiB of decoded chunks')
  let before = commits
  await put3MiB()
  await cache.flushWrites()
  t.ok(commits - before >= 2, `over the target 3 MiB of new entries go in batches of at most 2 MiB (${commits - before} commits)`)
  crossed(false)
  t.same(cache.writeBatch, own, 'under the target: the cache\'s own limits again')
  t.equal(cache.decodedCacheBytes, 16 * MIB, 'and its own decoded-chunk cap')
  before = commits
  const first = new Promise<void>(resolve => { committed = resolve })
  const start = performance.now()
  await put3MiB()
  await first
  const ms = performance.now() - start
  t.equal(commits - before, 1, 'under it the 3 MiB go in one batch')
  t.ok(ms >= 240, `after the cache's own 250 ms (${ms.toFixed(0)} ms)`)
})
