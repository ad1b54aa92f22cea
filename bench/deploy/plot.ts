/**
 * The benchmark's PNG plot, drawn by gnuplot (gnuplot-nox from apt,
 * pngcairo terminal): for each side, the time (y) until k containers
 * are ready, against k = 1..N (x) (schedule.ts readinessCurve: a cluster of parallel
 * nodes, each node's clock from 0).
 *
 * Bench-only: may import fixtures/run-command.ts, node built-ins.
 */
import { writeFile } from 'node:fs/promises'
import { runCommand } from '../../fixtures/run-command.js'

export interface Curve {
  label: string
  /** Seconds until the k-th container was ready, ascending. */
  seconds: number[]
}

/** gnuplot's string quoting. */
const gq = (s: string): string => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`

/** Write `png` (and its data and script next to it, `<png>.dat` / `<png>.gp`). Async; rejects if gnuplot fails or is missing. */
export async function plotReadiness (png: string, title: string, curves: Curve[]): Promise<void> {
  const data = curves.map(c => ['# ' + c.label, ...c.seconds.map((s, i) => `${i + 1} ${s.toFixed(3)}`)].join('\n')).join('\n\n\n')
  await writeFile(`${png}.dat`, data + '\n')
  const plots = curves.map((c, i) => `${gq(`${png}.dat`)} index ${i} using 1:2 with lines lw 2 title ${gq(c.label)}`)
  const script = [
    'set terminal pngcairo size 1000,620 enhanced font "DejaVu Sans,11"',
    `set output ${gq(png)}`,
    `set title ${gq(title)}`,
    'set xlabel "containers ready (task finished)"',
    'set ylabel "seconds until that many were ready"',
    'set key left top',
    'set grid',
    'set xrange [0:*]',
    'set yrange [0:*]',
    `plot ${plots.join(', \\\n     ')}`,
    ''
  ].join('\n')
  await writeFile(`${png}.gp`, script)
  await runCommand('gnuplot', [`${png}.gp`])
}
