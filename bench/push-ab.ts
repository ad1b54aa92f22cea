/**
 * A/B of the directory push: this checkout's build against another built
 * checkout (`--old DIR`, e.g. main at an earlier commit built in /tmp/ab-old),
 * on python-v1's merged tree, as bench/push-throughput.ts runs it (fresh
 * LAYERD_HOME and fs store per push, the source read into the page cache
 * and a `sync` before each push, untimed).
 *
 *   node dist/bench/push-ab.js --old DIR [--pairs N] [--work DIR] [--out DIR]
 *
 * Pairs are interleaved and the order alternates (old first in even pairs,
 * new first in odd ones: on this VM the push right after another's output
 * is a few percent slower, so a fixed order would favour one side). Both
 * sides must write the same image: the manifest digest of every push is
 * compared, and a difference fails the run (the change must not move a
 * stored byte).
 *
 * Bench-only: may import anything.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { fmt, LAYERCTL_JS, REPORT_OPTIONS, markdownTable, median, runInterleaved, shq, startLoadSampler, timeShell, writeReport, type Timed } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const SPEC = {
  old: { type: 'string', value: 'DIR' },
  pairs: { type: 'string', default: '10', value: 'N' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('push-ab', SPEC)
const OLD = ARGS.string('old')
const PAIRS = ARGS.number('pairs', { min: 1 })

interface Sample extends Timed { manifest: string }

async function main (): Promise<void> {
  const py = (await ensureDebianImages()).images['python-v1']
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-push-ab-'))
  const command = `node dist/bench/push-ab.js --old ${OLD} --pairs ${PAIRS}`
  console.error(`${command}\n  work dir ${work}`)
  const load = startLoadSampler()
  try {
    const push = (label: string, layerctl: string) => async (rep: number): Promise<Sample> => {
      const home = join(work, `${label}-${rep}`)
      // The source into the page cache before every push, untimed: another process on the machine may have dropped it.
      // (Through a pipe: GNU tar writing to /dev/null reads no file contents.)
      await timeShell(`tar -C ${shq(py.rootfs)} -cf - . | cat > /dev/null`)
      await timeShell('sync')
      const env = { ...process.env, LAYERD_HOME: home, LAYERD_STORE: `file://${join(home, 'store')}` }
      const t = await timeShell(`mkdir -p ${shq(home)} && exec node ${shq(layerctl)} --json push ${shq(py.rootfs)} bench/python:v1`, { env })
      await rm(home, { recursive: true, force: true })
      return { ...t, manifest: (JSON.parse(t.stdout) as { manifest: string }).manifest }
    }
    const contenders = [
      { name: `old (${OLD})`, run: push('old', join(OLD, 'dist/cli/layerctl.js')) },
      { name: 'new (this checkout)', run: push('new', LAYERCTL_JS) }
    ]
    const samples = await runInterleaved(PAIRS, contenders, s => `${fmt(s.seconds)} s wall, ${fmt(s.cpuSeconds)} s CPU`, { rotate: true })
    const [old, neu] = contenders.map(c => samples.get(c.name)!) as [Sample[], Sample[]]
    const manifests = new Set([...old, ...neu].map(s => s.manifest))
    if (manifests.size !== 1) throw new Error(`the two builds wrote different images: manifests ${[...manifests].join(', ')}`)
    const fig = (xs: Sample[]): { wall: number, cpu: number, meanWall: number } => ({
      wall: median(xs.map(s => s.seconds)), cpu: median(xs.map(s => s.cpuSeconds)), meanWall: xs.reduce((n, s) => n + s.seconds, 0) / xs.length
    })
    const a = fig(old)
    const b = fig(neu)
    const pairRatios = old.map((s, i) => neu[i]!.seconds / s.seconds)
    const newFaster = pairRatios.filter(r => r < 1).length
    const change = (x: number, y: number): string => `${fmt((y / x - 1) * 100, 1)}%`
    const markdown = [
      `Directory push of python-v1's tree, ${PAIRS} interleaved pairs (order alternating, a sync before each, fresh home each). ` +
        `Both builds wrote the same manifest in every push: \`${[...manifests][0]}\`.`,
      '',
      markdownTable(['build', 'median wall s', 'mean wall s', 'median CPU s'], [
        [contenders[0]!.name, fmt(a.wall), fmt(a.meanWall), fmt(a.cpu)],
        [contenders[1]!.name, fmt(b.wall), fmt(b.meanWall), fmt(b.cpu)]
      ]),
      '',
      `New against old: median wall **${change(a.wall, b.wall)}**, mean wall ${change(a.meanWall, b.meanWall)}, median CPU ${change(a.cpu, b.cpu)}; ` +
        `median of the per-pair ratios ${fmt(median(pairRatios), 3)}; the new build was faster in ${newFaster} of ${PAIRS} pairs.`
    ].join('\n')
    await writeReport({
      name: 'push-ab', title: 'Push A/B: directory push, this build against an older one', command, load: load.stop(), markdown,
      data: { old: OLD, pairs: PAIRS, manifest: [...manifests][0], oldFigures: a, newFigures: b, pairRatios, samples: { old: old.map(({ stdout: _, ...s }) => s), new: neu.map(({ stdout: _, ...s }) => s) } }
    }, ARGS.string('out'))
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}

await main()
