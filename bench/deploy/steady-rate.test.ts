/**
 * The deploy benchmark's long-run checks: steady rate and the plot's windows.
 */
import t from 'tap'
import type { ContainerTiming } from './schedule.js'
import { windowRates } from './series-plot.js'
import { steadyRate } from './steady-rate.js'

/** `n` containers per node, the i-th ending at Σ of `gap(i)` ms on its node's clock. */
function timings (nodes: number, n: number, gap: (i: number) => number): ContainerTiming[] {
  const out: ContainerTiming[] = []
  for (let node = 0; node < nodes; node++) {
    let end = 0
    for (let i = 0; i < n; i++) {
      end += gap(i)
      out.push({ index: i * nodes + node, node, startMs: end - gap(i), readyMs: gap(i), endMs: end })
    }
  }
  return out
}

t.test('steadyRate() reads an even run as 1x and a run that slows down as slower at the end', async t => {
  const even = steadyRate(timings(2, 4000, () => 100))
  t.equal(even.windowPerNode, 500)
  t.equal(even.firstSecondsPerContainer, 0.1)
  t.equal(even.lastSecondsPerContainer, 0.1)
  t.equal(even.lastOverFirst, 1)
  t.equal(even.windows.length, 8)
  t.ok(even.windowCv < 1e-9, 'no spread')

  const slowing = steadyRate(timings(2, 4000, i => 100 + i / 10))
  t.ok(slowing.lastOverFirst > 3, `last ÷ first ${slowing.lastOverFirst}`)
  t.ok(slowing.windowCv > 0.1)
})

t.test('steadyRate() fits its window to a short run and refuses an empty one', async t => {
  const short = steadyRate(timings(2, 100, () => 50))
  t.equal(short.windowPerNode, 50, 'at most half of each node')
  t.equal(short.windows.length, 2)
  t.throws(() => steadyRate([]), /no timings/)
})

t.test('windowRates() gives seconds per container per window of completions', async t => {
  const rates = windowRates(timings(1, 130, i => i < 64 ? 1000 : 500), 64)
  t.same(rates, [[64, 1], [128, 0.5]])
})
