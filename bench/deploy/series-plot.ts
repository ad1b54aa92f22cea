/**
 * The run's time-series plot (gnuplot, pngcairo), five panels over the
 * containers deployed on a node (x), one line per side and node: daemon
 * RSS, daemon open fds, mounts on the node's disk, loop devices on it,
 * and seconds per container (node time of each window of WINDOW
 * containers ÷ WINDOW). The node agent (layerd's library launcher runs
 * createSandbox in the bench process) is drawn dashed in the RSS and fd
 * panels.
 *
 * Bench-only: may import fixtures/run-command.ts, this folder, node built-ins.
 */
import { mkdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { runCommand } from '../../fixtures/run-command.js'
import type { SeriesSample } from './node-series.js'
import type { ContainerTiming } from './schedule.js'

const WINDOW = 64
const AGENT = 'agent'

export interface NodeSeriesLine {
  label: string
  samples: SeriesSample[]
  timings: ContainerTiming[]
}

const gq = (s: string): string => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`
const sumExcept = (r: Record<string, number>, skip: string): number => Object.entries(r).reduce((a, [k, v]) => k === skip ? a : a + v, 0)

/** (containers done, seconds per container) for consecutive windows of one node's completions. Pure. */
export function windowRates (timings: ContainerTiming[], window = WINDOW): Array<[number, number]> {
  const ends = timings.map(t => t.endMs).sort((a, b) => a - b)
  const out: Array<[number, number]> = []
  for (let i = window; i <= ends.length; i += window) out.push([i, (ends[i - 1]! - (i === window ? 0 : ends[i - window - 1]!)) / 1000 / window])
  return out
}

/**
 * Write `png`, with its data in `<png>.d/` (one file per line and kind, so
 * a line without data cannot shift the others) and its script in
 * `<png>.gp`. Async; rejects if gnuplot fails.
 */
export async function plotSeries (png: string, title: string, lines: NodeSeriesLine[]): Promise<void> {
  const dir = `${png}.d`
  await rm(dir, { recursive: true, force: true })
  await mkdir(dir, { recursive: true })
  const files = await Promise.all(lines.map(async (l, i) => {
    const samples = join(dir, `${i}-samples.dat`)
    const rates = join(dir, `${i}-rates.dat`)
    const windows = windowRates(l.timings)
    // A sample's own count is taken when a block's timings are in, so mid-block samples would stack; count completions by the sample's time instead.
    const ends = l.timings.map(t => t.endMs).sort((x, y) => x - y)
    const doneAt = (seconds: number): number => { let n = 0; while (n < ends.length && ends[n]! <= seconds * 1000) n++; return n }
    await writeFile(samples, ['# ' + l.label + ': done daemonRssMB daemonFds mounts loopDevices agentRssMB agentFds',
      ...l.samples.map(s => [ends.length > 0 ? doneAt(s.seconds) : s.done, (sumExcept(s.rssBytes, AGENT) / 1e6).toFixed(1), sumExcept(s.fds, AGENT), s.mounts, s.loopDevices,
        s.rssBytes[AGENT] === undefined ? 'NaN' : (s.rssBytes[AGENT] / 1e6).toFixed(1), s.fds[AGENT] ?? 'NaN'].join(' '))].join('\n') + '\n')
    await writeFile(rates, ['# ' + l.label + `: done secondsPerContainer (windows of ${WINDOW})`, ...windows.map(([d, s]) => `${d} ${s.toFixed(4)}`)].join('\n') + '\n')
    return { samples: l.samples.length > 0 ? samples : undefined, rates: windows.length > 0 ? rates : undefined, agent: l.samples.some(s => s.rssBytes[AGENT] !== undefined) }
  }))
  const panel = (ylabel: string, col: number, kind: 'samples' | 'rates', agentCol?: number): string[] => {
    const terms = lines.flatMap((l, i) => {
      const f = files[i]![kind]
      if (f === undefined) return []
      return [
        `${gq(f)} using 1:${col} with lines lw 2 lc ${i + 1} title ${gq(l.label)}`,
        ...(agentCol === undefined || !files[i]!.agent ? [] : [`${gq(f)} using 1:${agentCol} with lines lw 1 dt 2 lc ${i + 1} title ${gq(l.label + ' agent')}`])
      ]
    })
    return terms.length === 0 ? [] : [`set ylabel ${gq(ylabel)}`, 'plot ' + terms.join(', \\\n     ')]
  }
  const script = [
    'set terminal pngcairo size 1100,1500 enhanced font "DejaVu Sans,10"',
    `set output ${gq(png)}`,
    `set multiplot layout 5,1 title ${gq(title)}`,
    'set key outside right top',
    'set grid',
    'set xrange [0:*]',
    'set yrange [0:*]',
    'set xlabel "containers deployed on the node"',
    ...panel('daemon RSS (MB)', 2, 'samples', 6),
    ...panel('daemon open fds', 3, 'samples', 7),
    ...panel('mounts on node disk', 4, 'samples'),
    ...panel('loop devices on node disk', 5, 'samples'),
    ...panel(`seconds per container (windows of ${WINDOW})`, 2, 'rates'),
    'unset multiplot',
    ''
  ].join('\n')
  await writeFile(`${png}.gp`, script)
  await runCommand('gnuplot', [`${png}.gp`])
}
