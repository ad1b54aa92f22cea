/**
 * The long-run tables of the deploy report: whether each side kept its
 * speed (steady-rate.ts), and whether anything grew (node-series.ts
 * samples): daemon RSS and fds, the node agent's, mounts and loop devices.
 *
 * Bench-only: may import this folder and ../bench-report.ts.
 */
import { fmt, markdownTable } from '../bench-report.js'
import type { NodeRun, SideName } from './node-runs.js'
import type { SeriesSample } from './node-series.js'
import { steadyRate } from './steady-rate.js'

const AGENT = 'agent'

/** One row per side: first and last 1,000 containers' seconds per container, their ratio, and the windows' spread. */
export function steadyTable (runs: Map<SideName, NodeRun[]>): string {
  const rows: string[][] = []
  for (const [side, rs] of runs) {
    const timings = rs.flatMap(r => r.timings)
    if (timings.length < 2) continue
    const s = steadyRate(timings)
    rows.push([side, String(s.windowPerNode * rs.length), fmt(s.firstSecondsPerContainer, 3), fmt(s.lastSecondsPerContainer, 3),
      `${fmt(s.lastOverFirst, 2)}x`, String(s.windows.length), Number.isNaN(s.windowCv) ? '' : `${fmt(100 * s.windowCv, 1)}%`,
      s.windows.length > 1 ? `${fmt(Math.min(...s.windows.slice(1)), 3)}–${fmt(Math.max(...s.windows.slice(1)), 3)}` : ''])
  }
  return markdownTable(['side', 'window (containers)', 'first window (s/container)', 'last window (s/container)', 'last ÷ first', 'windows', 'spread (CV)', 'later windows min–max'], rows)
}

type Pick = (s: SeriesSample) => number | undefined

const sum = (r: Record<string, number>, only?: string): number | undefined => {
  if (only !== undefined) return r[only]
  return Object.entries(r).reduce((a, [k, v]) => k === AGENT ? a : a + v, 0)
}

const FIGURES: Array<[string, Pick, (n: number) => string]> = [
  ['daemon RSS (MB)', s => sum(s.rssBytes), n => fmt(n / 1e6, 1)],
  ['daemon fds', s => sum(s.fds), n => String(n)],
  ['agent RSS (MB)', s => sum(s.rssBytes, AGENT), n => fmt(n / 1e6, 1)],
  ['agent fds', s => sum(s.fds, AGENT), n => String(n)],
  ['mounts', s => s.mounts, n => String(n)],
  ['loop devices', s => s.loopDevices, n => String(n)]
]

/** One row per side, node and figure: first sample, largest, last. */
export function growthTable (runs: Map<SideName, NodeRun[]>): string {
  const rows: string[][] = []
  for (const [side, rs] of runs) {
    for (const r of rs) {
      if (r.series.length === 0) continue
      for (const [name, pick, show] of FIGURES) {
        const xs = r.series.map(pick)
        if (xs.every(x => x === undefined)) continue
        const vals = xs.map(x => x ?? 0)
        rows.push([side, String(r.node), name, show(vals[0]!), show(Math.max(...vals)), show(vals.at(-1)!)])
      }
    }
  }
  return markdownTable(['side', 'node', 'figure', 'first', 'largest', 'last'], rows)
}
