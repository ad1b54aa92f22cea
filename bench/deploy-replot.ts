/**
 * Redraw a deploy report's plots from its JSON, without running anything:
 * the readiness curve (NAME.png) and the run's time series
 * (NAME-series.png), next to the JSON.
 *
 *   node dist/bench/deploy-replot.js --json bench/results/deploy-8192.json
 *
 * For a long run whose plots need redrawing after a change to the plot
 * code; the figures are the JSON's, as the run wrote them.
 *
 * Bench-only: may import anything.
 */
import { readFile } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { benchArgs, type BenchOptions } from './bench-args.js'
import type { SeriesSample } from './deploy/node-series.js'
import { plotReadiness } from './deploy/plot.js'
import type { ContainerTiming } from './deploy/schedule.js'
import { plotSeries, type NodeSeriesLine } from './deploy/series-plot.js'

const SPEC = { json: { type: 'string', value: 'FILE' } } satisfies BenchOptions

interface SideJson { readiness: number[], containerTimings: Array<[number, number, number, number, number]> }
interface ReportJson {
  params: { containers: number, images: number, nodes: number, concurrency: number, network: string, sides: string[], partial?: boolean }
  series: Record<string, SeriesSample[][]>
  [side: string]: unknown
}

async function main (): Promise<void> {
  const file = benchArgs('deploy-replot', SPEC).string('json')
  const r = JSON.parse(await readFile(file, 'utf8')) as ReportJson
  const p = r.params
  if (p?.sides === undefined || r.series === undefined) throw new Error(`${file}: not a deploy report with series (params.sides and series are missing)`)
  const stem = join(dirname(file), basename(file, '.json'))
  const side = (name: string): SideJson => {
    const s = r[name] as SideJson | undefined
    if (s?.containerTimings === undefined) throw new Error(`${file}: side ${name} has no containerTimings`)
    return s
  }
  await plotReadiness(`${stem}.png`, `${p.containers} containers, ${p.images} images, ${p.nodes} nodes × ${p.concurrency} slots, ${p.network}`,
    p.sides.map(name => ({ label: name, seconds: side(name).readiness })))
  const lines: NodeSeriesLine[] = []
  for (const name of p.sides) {
    const timings: ContainerTiming[] = side(name).containerTimings.map(([index, node, startMs, readyMs, endMs]) => ({ index, node, startMs, readyMs, endMs }))
    for (const [node, samples] of (r.series[name] ?? []).entries()) {
      lines.push({ label: `${name} node ${node}`, samples, timings: timings.filter(t => t.node === node) })
    }
  }
  await plotSeries(`${stem}-series.png`, `${p.containers} containers${p.partial === true ? ' (partial)' : ''}: resources and speed over the run, per node`, lines)
  process.stdout.write(`wrote ${stem}.png and ${stem}-series.png\n`)
}

main().catch(err => {
  process.stderr.write(`deploy-replot: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exit(1)
})
