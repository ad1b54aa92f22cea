import t from 'tap'
import { open } from 'lmdb'
import { Compressor } from 'zstd-napi'
import { spawnSync } from 'node:child_process'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { UnsupportedError } from '../errors.js'
import { sha256Hex } from '../format/digest.js'
import {
  makeChunk, makeMeta, runChunkCacheConformance, runPersistenceConformance, tickingClock, waitFor, type CacheFactory
} from './chunk-cache.conformance.js'
import { LmdbChunkCache } from './lmdb-chunk-cache.js'
import { MARKER_FILE, currentBootId, readMarker, writeMarker, type ShutdownMarker } from './shutdown-marker.js'

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

t.test('LmdbChunkCache stores a chunk as its frame when that is smaller, and serves plain bytes', async t => {
  const dir = join(t.testdir(), 'cache')
  const opts = { maintenanceIntervalMs: 0 }
  const text = Buffer.from('def f(x):\n    return x * 2\n'.repeat(3000))
  const random = makeChunk(40_000)
  const compressor = new Compressor()
  const first = LmdbChunkCache.open(dir, opts)
  await first.put(sha256Hex(text), text, { frame: compressor.compress(text) })
  await first.put(random.digest, random.bytes, { frame: compressor.compress(random.bytes) })
  t.ok(first.get(sha256Hex(text))?.equals(text), 'served from the write buffer as plain bytes')
  await first.close()

  const second = LmdbChunkCache.open(dir, opts)
  const stats = second.stats()
  t.ok(stats.bytes < text.length / 20 + random.bytes.length + 100, `compressible chunk counted at its frame's size (${stats.bytes} bytes for ${text.length + random.bytes.length} plain)`)
  t.ok(stats.bytes >= random.bytes.length, 'an incompressible chunk is kept plain (its frame saves nothing)')
  t.ok(second.get(sha256Hex(text))?.equals(text), 'after reopen: plain bytes of the frame')
  t.ok(second.get(random.digest)?.equals(random.bytes), 'after reopen: the plain chunk')
  t.ok(second.get(sha256Hex(text))?.equals(text), 'a second hit on the same chunk')
  t.ok(second.get(sha256Hex(text))?.equals(text), 'a third')
  t.match(second.decodeStats, { decompressed: 2, reused: 1 }, 'kept in memory from the second hit on')
  await second.close()

  // Damage the stored frame: it must read as a miss (and go), never as wrong bytes.
  const env = open({ path: dir, noSubdir: false, maxDbs: 8 })
  const frames = env.openDB({ name: 'frames', encoding: 'binary' })
  const damaged = Buffer.from(frames.getBinary(sha256Hex(text))!)
  damaged.fill(0x55, 4)
  await frames.put(sha256Hex(text), damaged)
  await env.close()
  const lines: string[] = []
  const third = LmdbChunkCache.open(dir, { ...opts, log: line => lines.push(line) })
  t.teardown(() => third.close())
  t.equal(third.get(sha256Hex(text)), undefined, 'a damaged frame is a miss')
  t.match(lines.join('\n'), /damaged on disk/, 'and is logged')
  await waitFor(t, 'the damaged entry to be dropped', () => !third.has(sha256Hex(text)))
  t.ok(third.get(random.digest)?.equals(random.bytes), 'other chunks unaffected')
})

t.test('LmdbChunkCache.open() upgrades a format-1 cache in place, keeping its chunks', async t => {
  const dir = join(t.testdir(), 'cache')
  const a = makeChunk(5000)
  const first = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0 })
  await first.put(a.digest, a.bytes)
  await first.close()
  const env = open({ path: dir, noSubdir: false, maxDbs: 8 })
  await env.openDB({ name: 'info' }).put('format', 1)
  await env.close()
  const second = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0 })
  t.teardown(() => second.close())
  t.ok(second.get(a.digest)?.equals(a.bytes), 'the format-1 chunk is served')
})

t.test('LmdbChunkCache.put() batches inserts: visible at once, written in few transactions', async t => {
  const dir = join(t.testdir(), 'cache')
  const cache = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0, writeDelayMs: 60_000 })
  t.teardown(() => cache.close())
  const before = cache.lastTransactionId
  const chunks = Array.from({ length: 200 }, (_, i) => makeChunk(500 + i * 37))
  for (const c of chunks) await cache.put(c.digest, c.bytes)
  t.equal(cache.lastTransactionId, before, 'nothing committed yet: the batch waits')
  t.ok(chunks.every(c => cache.has(c.digest) && cache.get(c.digest)?.equals(c.bytes)), 'every entry served from the buffer')
  const m = makeMeta()
  await cache.putMeta(m.key, m.bytes)
  t.ok(cache.getMeta(m.key)?.equals(m.bytes), 'metadata too')
  await cache.flushWrites()
  t.equal(cache.lastTransactionId, before + 1, '201 entries, one transaction')
  t.ok(chunks.every(c => cache.get(c.digest)?.equals(c.bytes)), 'served from lmdb after the commit')
  t.match(cache.stats(), { chunks: 200, metaObjects: 1, writeErrors: 0 })
})

t.test('LmdbChunkCache.put() writes a batch once its delay or size is reached', async t => {
  const dir = join(t.testdir(), 'cache')
  const cache = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0, writeDelayMs: 30, writeBatchBytes: 10_000 })
  t.teardown(() => cache.close())
  const start = cache.lastTransactionId
  const small = makeChunk(100)
  await cache.put(small.digest, small.bytes)
  await waitFor(t, 'the delayed batch', () => cache.lastTransactionId > start)
  const big = makeChunk(20_000)
  const txn = cache.lastTransactionId
  await cache.put(big.digest, big.bytes)
  await waitFor(t, 'the full batch', () => cache.lastTransactionId > txn, 1_000)
  t.ok(cache.get(big.digest)?.equals(big.bytes))
})

t.test('LmdbChunkCache delete() and eviction see buffered entries', async t => {
  const dir = join(t.testdir(), 'cache')
  const cache = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0, writeDelayMs: 60_000, clock: tickingClock(), capBytes: 10_000, lowWatermark: 0.5 })
  t.teardown(() => cache.close())
  const a = makeChunk(1000)
  await cache.put(a.digest, a.bytes)
  await cache.delete(a.digest)
  t.equal(cache.has(a.digest), false, 'a buffered entry can be deleted')
  t.equal(cache.stats().bytes, 0)
  const chunks = Array.from({ length: 9 }, () => makeChunk(1000))
  for (const c of chunks) await cache.put(c.digest, c.bytes)
  t.equal(await cache.reclaim(), 4, 'reclaim evicts buffered entries once written, oldest first')
  t.same(chunks.map(c => cache.has(c.digest)), [false, false, false, false, true, true, true, true, true])
})

t.test('LmdbChunkCache keeps what a killed process committed (noSync, same boot)', async t => {
  const dir = join(t.testdir(), 'cache')
  const moduleUrl = new URL('./lmdb-chunk-cache.js', import.meta.url).href
  // The child commits 40 chunks, buffers 10 more, then dies without closing.
  const script = `
    import { createHash } from 'node:crypto'
    import { LmdbChunkCache } from ${JSON.stringify(moduleUrl)}
    const cache = LmdbChunkCache.open(${JSON.stringify(dir)}, { maintenanceIntervalMs: 0, writeDelayMs: 60000 })
    const chunk = i => Buffer.alloc(3000 + i * 101, i)
    const put = async i => { const b = chunk(i); await cache.put(createHash('sha256').update(b).digest('hex'), b) }
    for (let i = 0; i < 40; i++) await put(i)
    await cache.flushWrites()
    for (let i = 40; i < 50; i++) await put(i)
    process.kill(process.pid, 'SIGKILL')
  `
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })
  t.equal(child.signal, 'SIGKILL', `child killed (stderr: ${child.stderr.slice(0, 300)})`)
  const markerBefore = statSync(join(dir, MARKER_FILE)).ino
  const logs: string[] = []
  const cache = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0, log: line => logs.push(line) })
  t.teardown(() => cache.close())
  t.equal(statSync(join(dir, MARKER_FILE)).ino, markerBefore, 'the marker already says open in this boot: not rewritten (no fsyncs while a takeover waits)')
  t.equal(readMarker(dir)?.state, 'open', '… and still says open')
  const chunk = (i: number): Buffer => Buffer.alloc(3000 + i * 101, i)
  const digest = (b: Buffer): string => sha256Hex(b)
  t.same(logs, [], 'nothing discarded')
  t.ok(Array.from({ length: 40 }, (_, i) => chunk(i)).every(b => cache.get(digest(b))?.equals(b)), 'every committed chunk survives, byte for byte')
  t.equal(Array.from({ length: 10 }, (_, i) => chunk(40 + i)).filter(b => cache.has(digest(b))).length, 0, 'the unwritten batch is simply gone')
  t.match(cache.stats(), { chunks: 40 }, 'counters match the data')
})

t.test('LmdbChunkCache.open() discards a cache left open without fsync in an earlier boot, and only then', async t => {
  const c = makeChunk(5000)
  const setup = async (marker: ShutdownMarker | undefined): Promise<{ kept: boolean, logs: string[] }> => {
    const dir = join(t.testdir(), 'cache')
    const first = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0 })
    await first.put(c.digest, c.bytes)
    await first.close()
    if (marker !== undefined) writeMarker(dir, marker)
    const logs: string[] = []
    const again = LmdbChunkCache.open(dir, { maintenanceIntervalMs: 0, log: line => logs.push(line) })
    const kept = again.get(c.digest)?.equals(c.bytes) === true
    t.equal(again.stats().chunks, kept ? 1 : 0, 'counters follow')
    await again.close()
    t.equal(readMarker(dir)?.state, 'closed', 'closed cleanly again')
    return { kept, logs }
  }
  const boot = currentBootId()
  t.ok(boot.length > 0, 'this kernel exposes a boot id')
  t.equal((await setup(undefined)).kept, true, 'clean close: kept')
  t.equal((await setup({ state: 'open', noSync: true, bootId: boot, pid: 1 })).kept, true, 'killed process, same boot: kept')
  t.equal((await setup({ state: 'open', noSync: false, bootId: 'an-earlier-boot', pid: 1 })).kept, true, 'synced writer, machine crash: kept (lmdb is consistent)')
  const crashed = await setup({ state: 'open', noSync: true, bootId: 'an-earlier-boot', pid: 1 })
  t.equal(crashed.kept, false, 'unsynced writer, machine went down: discarded')
  t.match(crashed.logs.join('\n'), /discarding its contents: the machine went down/)
  t.equal((await setup({ state: 'closed', noSync: true, bootId: boot, pid: 1, syncFailed: true })).kept, false, 'final sync failed: discarded')
})

t.test('LmdbChunkCache timer rewrites an access time only once it is recencyResolutionMs old; close saves it exactly', async t => {
  const dir = join(t.testdir(), 'cache')
  let now = 1_000
  const opts = { clock: () => now, maintenanceIntervalMs: 15, recencyResolutionMs: 60_000, writeDelayMs: 1 }
  const cache = LmdbChunkCache.open(dir, opts)
  const a = makeChunk(2000)
  await cache.put(a.digest, a.bytes)
  await cache.flushWrites()
  const persisted = (c: LmdbChunkCache): number | undefined =>
    ([...c.coldest()].find(e => e.key === a.digest) as { atimeMs?: number } | undefined)?.atimeMs
  const ticks = async (): Promise<void> => { await new Promise(resolve => setTimeout(resolve, 80)) }
  t.equal(persisted(cache), 1_000)
  now = 30_000
  cache.get(a.digest)
  await ticks()
  t.equal(persisted(cache), 1_000, 'a hit 29 s later: not rewritten by the timer')
  now = 70_000
  cache.get(a.digest)
  await ticks()
  t.equal(persisted(cache), 70_000, '69 s later: rewritten')
  now = 71_000
  cache.get(a.digest)
  await cache.close()
  const again = LmdbChunkCache.open(dir, { ...opts, maintenanceIntervalMs: 0 })
  t.teardown(() => again.close())
  t.equal(persisted(again), 71_000, 'close saves the last hit exactly')
})
