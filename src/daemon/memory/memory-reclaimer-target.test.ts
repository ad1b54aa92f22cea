/**
 * MemoryReclaimer's target edge (issue 14): while use is over the target it
 * runs a collection each time its anonymous memory grew by
 * collectGrowthBytes, never under it, and tells its owner when use crosses
 * the target either way. The gauge is a reading the test sets; the memory is
 * real (filled buffers; the reclaimer reads /proc/self/statm); time is a
 * ManualClock, so each step says how long passes without waiting for it.
 */
import t, { type Test } from 'tap'
import type { MemoryReading } from '../../host/memory-pressure.js'
import { ManualClock } from '../../../fixtures/manual-clock.js'
import { MemoryReclaimer } from './memory-reclaimer.js'

const MIB = 1024 * 1024

t.test('MemoryReclaimer collects on anonymous memory growth only while over the target, and reports crossings', async t => {
  let reading: MemoryReading = { usedBytes: 10 * MIB, limitBytes: 1024 * MIB, psiSomeAvg10: 0 }
  let collections = 0
  const crossings: boolean[] = []
  const clock = new ManualClock()
  const tick = async (ms: number): Promise<void> => { await clock.advance(ms) }
  const reclaimer = new MemoryReclaimer({
    clock,
    gauge: { source: 'test', read: () => reading },
    targetBytes: 100 * MIB,
    settle: async () => {},
    cacheFiles: () => [],
    collect: () => { collections++ },
    collectGrowthBytes: 4 * MIB,
    overTargetChanged: over => crossings.push(over),
    intervalMs: 10
  })
  t.teardown(() => reclaimer.close())
  const held: Buffer[] = []
  // 16 MiB of growth against a 4 MiB step: V8 may give back a few MiB of its own heap meanwhile (its memory
  // reducer runs after start-up), which 6 MiB did not survive on a loaded machine.
  const grow = async (): Promise<void> => { for (let i = 0; i < 16; i++) { held.push(Buffer.alloc(MIB, 1)); await tick(15) } }
  await tick(30)
  await grow()
  t.equal(collections, 0, 'under the target: no collection, however much memory grows')
  t.strictSame(crossings, [], 'no crossing yet')
  reading = { ...reading, usedBytes: 200 * MIB }
  await tick(30)
  t.equal(reclaimer.overTarget, true)
  t.strictSame(crossings, [true], 'told once on crossing up')
  await grow()
  t.ok(collections >= 1, `over the target, 16 MiB of growth: collected (${collections})`)
  t.equal(reclaimer.stats.collections, collections, 'counted in stats')
  // Growth counted after grow() returned (the last buffers' pages, a step part-way) may still collect once:
  // let it, then nothing more may come while nothing grows.
  await tick(60)
  const seen = collections
  await tick(100)
  t.equal(collections, seen, 'no growth: no further collection')
  reading = { ...reading, usedBytes: 10 * MIB }
  await tick(30)
  t.strictSame(crossings, [true, false], 'told once on crossing down')
  held.length = 0
})

t.test('MemoryReclaimer keeps collecting on growth while a pass (a slow settle) is running', async t => {
  let collections = 0
  let settles = 0
  let endSettle!: () => void
  const clock = new ManualClock()
  const tick = async (ms: number): Promise<void> => { await clock.advance(ms) }
  const reclaimer = new MemoryReclaimer({
    clock,
    gauge: { source: 'test', read: () => ({ usedBytes: 200 * MIB, limitBytes: 1024 * MIB, psiSomeAvg10: 0 }) },
    targetBytes: 100 * MIB,
    // The first pass settles, and this settle lasts until the test ends it.
    settle: async () => { settles++; await new Promise<void>(resolve => { endSettle = resolve }) },
    cacheFiles: () => [],
    collect: () => { collections++ },
    collectGrowthBytes: 4 * MIB,
    intervalMs: 10,
    collectCheckMs: 10
  })
  t.teardown(() => reclaimer.close())
  await tick(40)
  t.equal(settles, 1, 'a pass is settling')
  const held: Buffer[] = []
  for (let i = 0; i < 16; i++) { held.push(Buffer.alloc(MIB, 1)); await tick(15) }
  t.equal(settles, 1, 'the settle is still running')
  t.ok(collections >= 1, `16 MiB of growth during the settle: collected (${collections})`)
  endSettle()
  held.length = 0
})

/**
 * A reclaimer watching a burst counter (`reads`), with its settles and flushes
 * counted; the periodic settle only once (the first pass over the target), so
 * any later settle is a burst's. `burst(n)`: n reads over 150 ms.
 */
function burstWatch (t: Test, gapMs: number, over: () => boolean = () => true): { counts: { reads: number, settles: number, flushes: number }, reclaimer: MemoryReclaimer, burst: (n: number) => Promise<void>, tick: (ms: number) => Promise<void>, clock: ManualClock } {
  const counts = { reads: 0, settles: 0, flushes: 0 }
  const clock = new ManualClock()
  const tick = async (ms: number): Promise<void> => { await clock.advance(ms) }
  const reclaimer = new MemoryReclaimer({
    clock,
    gauge: { source: 'test', read: () => ({ usedBytes: over() ? 200 * MIB : 10 * MIB, limitBytes: 1024 * MIB, psiSomeAvg10: 0 }) },
    targetBytes: 100 * MIB,
    settle: async () => { counts.settles++ },
    flushWrites: async () => { counts.flushes++ },
    cacheFiles: () => [],
    activity: () => counts.reads,
    burstMinReads: 100,
    burstQuietMs: 50,
    burstSettleGapMs: gapMs,
    settleEveryMs: 60_000,
    intervalMs: 10,
    collectCheckMs: 10
  })
  t.teardown(() => reclaimer.close())
  const burst = async (n: number): Promise<void> => { for (let i = 0; i < 10; i++) { counts.reads += n / 10; await tick(15) } }
  return { counts, reclaimer, burst, tick, clock }
}

t.test('MemoryReclaimer settles, and drops the pages a burst wrote, as soon as a burst of chunk reads ends over the target', async t => {
  let over = true
  const { counts, reclaimer, burst, tick } = burstWatch(t, 100, () => over)
  await tick(60)
  t.equal(counts.settles, 1, 'the first pass over the target settles')
  t.equal(counts.flushes, 0, 'the periodic settle leaves the pages just written (hits during a burst read them)')
  await burst(500)
  t.equal(counts.settles, 1, 'no settle while the burst goes on')
  await tick(250)
  t.equal(counts.settles, 2, 'the burst ended: settled at once, not at the next periodic settle')
  t.equal(counts.flushes, 1, 'with the burst\'s pages flushed')
  t.equal(reclaimer.stats.burstEnds, 1, 'counted')
  await burst(50)
  await tick(250)
  t.equal(counts.settles, 2, 'a few reads are no burst: no settle')
  over = false
  await tick(40)
  await burst(500)
  await tick(250)
  t.equal(counts.settles, 2, 'under the target: no settle at a burst\'s end')
})

t.test('MemoryReclaimer settles at a burst\'s end at once after a periodic settle during the burst; the gap counts from the last burst\'s settle', async t => {
  const { counts, reclaimer, burst, tick, clock } = burstWatch(t, 1000)
  await tick(20)
  const started = clock.now()
  await burst(500)
  t.equal(counts.settles, 1, 'the periodic settle came during the burst')
  await tick(150)
  t.equal(counts.settles, 2, `the burst ended ${(clock.now() - started).toFixed(0)} ms after the periodic settle: settled at once, not after the 1 s gap`)
  t.equal(counts.flushes, 1, 'with its pages flushed')
  const second = clock.now()
  await burst(500)
  await tick(150)
  t.equal(counts.settles, 2, 'a second burst ending within 1 s of the first one\'s settle waits out the gap')
  await tick(Math.max(0, 1100 - (clock.now() - second)))
  t.equal(counts.settles, 3, 'and settles once it is over')
  t.equal(reclaimer.stats.burstEnds, 2, 'two burst ends')
})
