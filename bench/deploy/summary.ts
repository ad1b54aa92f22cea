/**
 * From per-node runs to the figures of the report: one summary per side
 * (the deploy.json fields), the Markdown tables, and the ratios.
 *
 * Cluster figures, nodes being separate machines:
 * - seconds: the slowest node's deploy time (nodes run one after another
 *   here model parallel machines; with --parallel-nodes they also ran side
 *   by side, and wallSeconds adds the whole run's wall time, node set-up
 *   and teardown included);
 * - bytesTransferred, bytesWritten, footprintBytes: sums over nodes;
 * - peakRssBytes: the largest per-node daemon peak (a node's memory need);
 * - p50, p99: time to ready over all containers (seconds).
 *
 * Bench-only: may import this folder and ../bench-report.ts.
 */
import { fmt, markdownTable } from '../bench-report.js'
import type { NodeRun, SideName } from './node-runs.js'
import { quantile, readinessCurve } from './schedule.js'

export interface SideSummary {
  label: string
  seconds: number
  bytesTransferred: number
  bytesWritten: number
  peakRssBytes: number
  /** Time to ready, seconds. */
  p50: number
  p99: number
  containers: number
  nodes: number
  footprintBytes: number
  /** Σ of the nodes' deploy times (what one machine spent). */
  sumNodeSeconds: number
  /** --parallel-nodes: wall time of all nodes side by side, set-up and teardown included. */
  wallSeconds?: number
  meanReadySeconds: number
  chunkBytesFetched?: number
  fetches?: number
  bytesUploaded?: number
  perNode: Array<Omit<NodeRun, 'timings' | 'outputs' | 'series'>>
  /** Every container: index, node (image: schedule.ts placeContainers), start, time to ready and end, ms. */
  containerTimings: Array<[index: number, node: number, startMs: number, readyMs: number, endMs: number]>
  /** Seconds until the k-th container was ready, k = 1..N. */
  readiness: number[]
}

export const SIDE_LABELS: Record<SideName, string> = {
  docker: 'Docker: docker pull + docker run (overlay2), registry through the node link',
  layerd: 'layerd, fs store (a local directory: no network, no throttle)',
  layerdS3: 'layerd, S3 store (s3rver) through the node link'
}

export function summarizeSide (side: SideName, runs: NodeRun[], wallSeconds?: number): SideSummary {
  const timings = runs.flatMap(r => r.timings)
  const ready = timings.map(t => t.readyMs / 1000)
  const sum = (f: (r: NodeRun) => number | undefined): number => runs.reduce((a, r) => a + (f(r) ?? 0), 0)
  const s: SideSummary = {
    label: SIDE_LABELS[side],
    seconds: Math.max(...runs.map(r => r.seconds)),
    bytesTransferred: sum(r => r.bytesTransferred),
    bytesWritten: sum(r => r.bytesWritten),
    peakRssBytes: Math.max(...runs.map(r => r.peakRssBytes)),
    p50: quantile(ready, 0.5),
    p99: quantile(ready, 0.99),
    containers: timings.length,
    nodes: runs.length,
    footprintBytes: sum(r => r.footprintBytes),
    sumNodeSeconds: sum(r => r.seconds),
    meanReadySeconds: ready.reduce((a, b) => a + b, 0) / ready.length,
    perNode: runs.map(({ timings: _t, outputs: _o, series: _s, ...rest }) => rest),
    readiness: readinessCurve(timings),
    containerTimings: timings.map(t => [t.index, t.node, Math.round(t.startMs), Math.round(t.readyMs), Math.round(t.endMs)])
  }
  if (runs.some(r => r.chunkBytesFetched !== undefined)) s.chunkBytesFetched = sum(r => r.chunkBytesFetched)
  if (wallSeconds !== undefined) s.wallSeconds = wallSeconds
  if (runs.some(r => r.fetches !== undefined)) s.fetches = sum(r => r.fetches)
  if (runs.some(r => r.bytesUploaded !== undefined)) s.bytesUploaded = sum(r => r.bytesUploaded)
  return s
}

const mb = (b: number): string => fmt(b / 1e6, 1)

/** The main table: one row per side, then the ratios of Docker to each layerd side, the side that crosses the link (S3) first. */
export function sidesTable (sides: Partial<Record<SideName, SideSummary>>): string {
  const rows: string[][] = []
  for (const [name, s] of Object.entries(sides) as Array<[SideName, SideSummary]>) {
    rows.push([name, fmt(s.seconds, 1), fmt(s.p50, 2), fmt(s.p99, 2), mb(s.bytesTransferred), mb(s.bytesWritten), mb(s.footprintBytes), mb(s.peakRssBytes)])
  }
  const d = sides.docker
  const ratios: string[] = []
  if (d !== undefined) {
    for (const name of ['layerdS3', 'layerd'] as const) {
      const l = sides[name]
      if (l === undefined) continue
      ratios.push(`| Docker ÷ ${name} | ${fmt(d.seconds / l.seconds, 2)}x | ${fmt(d.p50 / l.p50, 2)}x | ${fmt(d.p99 / l.p99, 2)}x | ` +
        `${fmt(d.bytesTransferred / l.bytesTransferred, 2)}x | ${fmt(d.bytesWritten / l.bytesWritten, 2)}x | ${fmt(d.footprintBytes / l.footprintBytes, 2)}x | ${fmt(d.peakRssBytes / l.peakRssBytes, 2)}x |`)
    }
  }
  return [
    markdownTable(['side', 'seconds (all ready)', 'time to ready p50 (s)', 'p99 (s)', 'transferred (MB)', 'written to disk (MB)', 'left on disk (MB)', 'peak daemon RSS (MB)'], rows),
    ...ratios
  ].join('\n')
}

/** Per-node rows. */
export function nodesTable (sides: Partial<Record<SideName, SideSummary>>): string {
  const rows: string[][] = []
  for (const [name, s] of Object.entries(sides) as Array<[SideName, SideSummary]>) {
    for (const n of s.perNode) {
      rows.push([name, String(n.node), String(n.containers), fmt(n.seconds, 1), mb(n.bytesTransferred), n.fetches === undefined ? '' : String(n.fetches),
        mb(n.bytesWritten), mb(n.footprintBytes), mb(n.peakRssBytes),
        Object.entries(n.rss).map(([k, v]) => `${k} ${mb(v)}`).join(', '), `${mb(n.rssAtEnd.anon)} / ${mb(n.rssAtEnd.file)}`])
    }
  }
  return markdownTable(['side', 'node', 'containers', 'seconds', 'transferred (MB)', 'chunk fetches', 'written (MB)', 'left on disk (MB)', 'peak RSS (MB)', 'daemons (VmHWM)', 'RSS at end: anon / file-backed (MB)'], rows)
}
