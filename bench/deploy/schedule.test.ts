/**
 * The deploy benchmark's placement, concurrency and statistics.
 */
import t from 'tap'
import { placeContainers, quantile, readinessCurve, runWithConcurrency } from './schedule.js'

t.test('placeContainers() spreads containers round robin and cycles every node through all images', async t => {
  const tasks = ['a', 'b', 'c', 'd']
  const nodes = placeContainers(16, 2, tasks)
  t.same(nodes.map(n => n.length), [8, 8])
  t.same(nodes[0]!.map(p => p.index), [0, 2, 4, 6, 8, 10, 12, 14])
  for (const n of nodes) t.same(new Set(n.map(p => p.task)).size, 4, `node ${n[0]!.node} runs every image`)
  const counts = new Map<string, number>()
  for (const p of nodes.flat()) counts.set(p.task, (counts.get(p.task) ?? 0) + 1)
  t.same([...counts.values()], [4, 4, 4, 4], 'N / K containers per image')
  t.throws(() => placeContainers(1, 1, []))
})

t.test('runWithConcurrency() keeps at most C deploys in flight and times each', async t => {
  const placements = placeContainers(10, 1, ['x'])[0]!
  let inFlight = 0
  let peak = 0
  const r = await runWithConcurrency(placements, 3, async () => {
    inFlight++
    peak = Math.max(peak, inFlight)
    await new Promise(resolve => setTimeout(resolve, 20))
    inFlight--
    return { readyMs: 20 }
  })
  t.equal(peak, 3)
  t.equal(r.timings.length, 10)
  t.same(r.timings.map(x => x.index), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
  t.ok(r.seconds >= 0.07, `4 rounds of 20 ms (${r.seconds.toFixed(3)} s)`)
  t.ok(r.timings[9]!.startMs >= 55, 'the last one waited for a slot')
  await t.rejects(runWithConcurrency(placements, 2, async p => { if (p.index === 4) throw new Error('boom'); return { readyMs: 1 } }), /boom/)
})

t.test('quantile() is nearest-rank and readinessCurve() sorts ready times', async t => {
  const xs = Array.from({ length: 100 }, (_, i) => i + 1)
  t.equal(quantile(xs, 0.5), 50)
  t.equal(quantile(xs, 0.99), 99)
  t.equal(quantile([3, 1, 2], 1), 3)
  t.ok(Number.isNaN(quantile([], 0.5)))
  t.same(readinessCurve([
    { index: 0, node: 0, startMs: 1000, readyMs: 500, endMs: 1600 },
    { index: 1, node: 1, startMs: 0, readyMs: 700, endMs: 800 }
  ]), [0.7, 1.5])
})
