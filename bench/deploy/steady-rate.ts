/**
 * Does a side slow down over a long run? From the containers' timings:
 * seconds per container over each node's first k and last k completions
 * (k = 1,000 cluster-wide, split over the nodes), and the same over every
 * window of k through the run, whose spread is the run's noise.
 *
 * A node's clock counts its own blocks only (node-runs.ts), so a window's
 * span is node time. The first window includes the cold pulls/mounts.
 *
 * Pure. Bench-only: may import this folder.
 */
import type { ContainerTiming } from './schedule.js'

export interface SteadyRate {
  /** Containers per node per window. */
  windowPerNode: number
  /** Seconds per container (node time ÷ containers, summed over nodes) in the first and last windows. */
  firstSecondsPerContainer: number
  lastSecondsPerContainer: number
  /** last ÷ first. */
  lastOverFirst: number
  /** Every window's seconds per container, in run order (cluster-wide: the nodes' k-th windows together). */
  windows: number[]
  /** Standard deviation ÷ mean of the windows after the first (the first holds the cold start). */
  windowCv: number
}

/** Node → its timings sorted by completion. */
function byNode (timings: ContainerTiming[]): ContainerTiming[][] {
  const m = new Map<number, ContainerTiming[]>()
  for (const t of timings) {
    let l = m.get(t.node)
    if (l === undefined) { l = []; m.set(t.node, l) }
    l.push(t)
  }
  return [...m.values()].map(l => [...l].sort((a, b) => a.endMs - b.endMs))
}

/** Span (ms) of completions (from, to] on one node; from = -1 means from the node's clock 0. */
const span = (l: ContainerTiming[], from: number, to: number): number => l[to]!.endMs - (from < 0 ? 0 : l[from]!.endMs)

/** Seconds per container in consecutive windows of `clusterWindow` containers. Throws for an empty run. */
export function steadyRate (timings: ContainerTiming[], clusterWindow = 1000): SteadyRate {
  const nodes = byNode(timings)
  if (nodes.length === 0) throw new Error('steadyRate: no timings')
  const shortest = Math.min(...nodes.map(l => l.length))
  const k = Math.max(1, Math.min(Math.floor(shortest / 2), Math.round(clusterWindow / nodes.length)))
  const windowAt = (w: number): number => {
    let ms = 0
    for (const l of nodes) ms += span(l, w * k - 1, w * k + k - 1)
    return ms / 1000 / (k * nodes.length)
  }
  const windows: number[] = []
  for (let w = 0; (w + 1) * k <= shortest; w++) windows.push(windowAt(w))
  let lastMs = 0
  for (const l of nodes) lastMs += span(l, l.length - k - 1, l.length - 1)
  const first = windows[0]!
  const last = lastMs / 1000 / (k * nodes.length)
  const rest = windows.slice(1)
  const mean = rest.reduce((a, b) => a + b, 0) / rest.length
  const sd = Math.sqrt(rest.reduce((a, b) => a + (b - mean) ** 2, 0) / rest.length)
  return {
    windowPerNode: k,
    firstSecondsPerContainer: first,
    lastSecondsPerContainer: last,
    lastOverFirst: last / first,
    windows,
    windowCv: rest.length > 1 ? sd / mean : NaN
  }
}
