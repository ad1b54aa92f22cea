/**
 * Sandbox churn (issue 17, part 2): C concurrent creators each loop
 * create → exec `true` → destroy for S seconds, over a real layerd mount of
 * the Debian python image with a warm chunk cache (`layerctl pull --all`).
 * The library path calls createSandbox() (src/sandbox/); `--cli` runs
 * `layerctl run --tier T IMAGE -- true` as a harness in another language would:
 * through layerctl's C front (native/layerctl.c, served by layerd's run
 * socket), or with `--client node` through the Node CLI (a Node process each).
 *
 *   node dist/bench/churn.js [--tier process|container] [--runtime runc|crun] [--seconds S] [--concurrency C] [--cli [--client front|node]] [--side-by-side] [--out DIR]
 *
 * `--side-by-side` runs the library, the C front and the Node CLI in turn at
 * each C, in one run, so their ratio is measured under the same load; the
 * JSON's top-level figures are still those of the path the other flags name.
 *
 * Without --concurrency it sweeps C = 1, 2, 4, 8, 16. Writes <out>/churn.json
 * ({ tier, concurrency, seconds, created, perSecond, p50Ms, p99Ms, errors } of
 * the best C, and every row, with the CPU-ms each sandbox cost) and
 * churn.md. No warm pool is used.
 *
 * Bench-only: may import anything.
 */
import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { layerdNode, LAYERCTL_ENTRY, LAYERCTL_FRONT, run } from '../fixtures/layerd-harness.js'
import { createSandbox } from '../src/sandbox/create-sandbox.js'
import type { OciRuntimeName } from '../src/runtime/container/oci-runtime.js'
import type { Tier } from '../src/runtime/sandbox.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { fmt, markdownTable, quantile, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'

const SPEC = {
  tier: { type: 'string', default: 'process', value: 'process|container' },
  seconds: { type: 'string', default: '20', value: 'S' },
  concurrency: { type: 'string', value: 'C' },
  cli: { type: 'boolean' },
  client: { type: 'string', default: 'front', value: 'front|node' },
  'side-by-side': { type: 'boolean' },
  runtime: { type: 'string', default: 'runc', value: 'runc|crun' },
  ...REPORT_OPTIONS
} satisfies BenchOptions

type ChurnPath = 'library' | 'front' | 'node'
const PATH_LABEL: Record<ChurnPath, string> = { library: 'library', front: 'layerctl run (C front)', node: 'layerctl run (Node CLI)' }

interface ChurnRow { path: ChurnPath, tier: Tier, cli: boolean, concurrency: number, seconds: number, created: number, perSecond: number, p50Ms: number, p99Ms: number, errors: number, cpuMsPerSandbox?: number, firstError?: string }

/**
 * CPU time of this process and everything it starts (layerd, sh, bwrap,
 * runc, mkfs), from a cpuacct cgroup of its own: a figure the machine's
 * other load does not move, unlike the rate. Kernel work done in worker
 * threads (loop I/O, namespace teardown) is not in it. Undefined without
 * a cgroup v1 cpuacct hierarchy.
 */
function cpuMeter (): { usageMs: () => number | undefined, close: () => void } {
  const root = '/sys/fs/cgroup/cpuacct'
  const dir = `${root}/layerd-churn-${process.pid}`
  try {
    mkdirSync(dir)
    writeFileSync(`${dir}/cgroup.procs`, String(process.pid))
  } catch { return { usageMs: () => undefined, close: () => {} } }
  return {
    usageMs: () => Number(readFileSync(`${dir}/cpuacct.usage`, 'utf8')) / 1e6,
    close: () => { try { writeFileSync(`${root}/cgroup.procs`, String(process.pid)); rmdirSync(dir) } catch {} }
  }
}

async function churn (one: () => Promise<void>, path: ChurnPath, tier: Tier, concurrency: number, seconds: number, cpuMs: () => number | undefined): Promise<ChurnRow> {
  const durations: number[] = []
  const cpu0 = cpuMs()
  let errors = 0
  let firstError: string | undefined
  const start = performance.now()
  const end = start + seconds * 1000
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < end) {
      const t0 = performance.now()
      try {
        await one()
        durations.push(performance.now() - t0)
      } catch (err) {
        errors++
        firstError ??= (err as Error).message
      }
    }
  }))
  const elapsed = (performance.now() - start) / 1000
  const cpu1 = cpuMs()
  durations.sort((a, b) => a - b)
  return {
    ...(cpu0 === undefined || cpu1 === undefined || durations.length === 0 ? {} : { cpuMsPerSandbox: (cpu1 - cpu0) / durations.length }),
    path, tier, cli: path !== 'library', concurrency, seconds: elapsed, created: durations.length, perSecond: durations.length / elapsed,
    p50Ms: quantile(durations, 0.5), p99Ms: quantile(durations, 0.99), errors, ...(firstError === undefined ? {} : { firstError })
  }
}

async function main (): Promise<void> {
  const a = benchArgs('churn', SPEC)
  const tier = a.choice<Tier>('tier', ['process', 'container'])
  const seconds = a.number('seconds', { min: 1 })
  const levels = a.optString('concurrency') === undefined ? [1, 2, 4, 8, 16] : [a.number('concurrency', { min: 1 })]
  const cli = a.flag('cli')
  const client = a.choice<'front' | 'node'>('client', ['front', 'node'])
  const runtime = a.choice<OciRuntimeName>('runtime', ['runc', 'crun'])
  const command = `node dist/bench/churn.js ${process.argv.slice(2).join(' ')}`.trim()
  const images = await ensureDebianImages()
  const work = await mkdtemp('/var/tmp/layerd-churn-')
  const node = layerdNode(join(work, 'home'))
  const cpu = cpuMeter() // before layerd starts, so that it is counted too
  try {
    await node.startDaemon()
    for (const args of [['push', images.images['python-v1'].dockerArchive, 'bench/python:v1'], ['pull', '--all', 'bench/python:v1']]) {
      const r = await node.layerctl(...args)
      if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')}: ${r.stderr}`)
    }
    const base = { image: 'bench/python:v1', home: node.home, store: node.store, tier, runtime }
    const library = async (): Promise<void> => {
      const sb = await createSandbox(base)
      try {
        const r = await sb.exec({ cmd: ['true'] })
        if (r.exitCode !== 0) throw new Error(`exec true exited ${r.exitCode}: ${r.stderr.toString()}`)
      } finally { await sb.destroy() }
    }
    const viaCli = (how: 'front' | 'node') => async (): Promise<void> => {
      const args = ['run', '--tier', tier, ...(tier === 'container' ? ['--runtime', runtime] : []), 'bench/python:v1', '--', 'true']
      const r = how === 'front' ? await run(LAYERCTL_FRONT, args, node.env) : await run(process.execPath, [LAYERCTL_ENTRY, ...args], node.env)
      if (r.code !== 0) throw new Error(`layerctl run exited ${r.code}: ${r.stderr}`)
    }
    const ways: Record<ChurnPath, () => Promise<void>> = { library, front: viaCli('front'), node: viaCli('node') }
    const primary: ChurnPath = cli ? client : 'library'
    const paths: ChurnPath[] = a.flag('side-by-side') ? ['library', 'front', 'node'] : [primary]
    for (const path of paths) for (let i = 0; i < 3; i++) await ways[path]() // warm: the image mounted, drivers probed, the runner started
    const load = startLoadSampler()
    const rows: ChurnRow[] = []
    for (const c of levels) for (const path of paths) {
      const row = await churn(ways[path], path, tier, c, seconds, cpu.usageMs)
      process.stderr.write(`${PATH_LABEL[path]} C=${c}: ${row.created} in ${fmt(row.seconds, 1)} s = ${fmt(row.perSecond, 1)}/s, p50 ${fmt(row.p50Ms, 0)} ms, p99 ${fmt(row.p99Ms, 0)} ms, ` +
        `${fmt(row.cpuMsPerSandbox ?? NaN, 1)} CPU-ms each, ${row.errors} errors\n`)
      rows.push(row)
    }
    const best = rows.filter(r => r.path === primary).reduce((b, r) => r.perSecond > b.perSecond ? r : b)
    const target = tier === 'process' ? (cli ? 25 : 50) : (cli ? 25 : 30)
    const table = markdownTable(['path', 'tier', 'C', 'created', 'per second', 'p50 ms', 'p99 ms', 'CPU-ms per sandbox', 'errors'],
      rows.map(r => [PATH_LABEL[r.path], r.tier, String(r.concurrency), String(r.created), fmt(r.perSecond, 1), fmt(r.p50Ms, 0), fmt(r.p99Ms, 0), fmt(r.cpuMsPerSandbox ?? NaN, 1), String(r.errors)]))
    const verdict = `${PATH_LABEL[primary]}, best C = ${best.concurrency}: ${fmt(best.perSecond, 1)}/s (target ≥ ${target}/s ${best.perSecond >= target ? '✓' : '✗'}), ` +
      `p99 ${fmt(best.p99Ms, 0)} ms (target < 250 ms ${best.p99Ms < 250 ? '✓' : '✗'}), ${best.errors} errors. No warm pool.` +
      (best.cpuMsPerSandbox === undefined ? '' : ` CPU per sandbox (this process, layerd and their children): ${fmt(best.cpuMsPerSandbox, 1)} ms, so 2 idle cores would allow at most ${fmt(2000 / best.cpuMsPerSandbox, 0)}/s.`)
    await writeReport({
      name: 'churn',
      title: `Sandbox churn: ${tier} tier${tier === 'container' ? ` (${runtime})` : ''}, ${paths.map(p => PATH_LABEL[p]).join(' / ')}`,
      command,
      load: load.stop(),
      markdown: `${table}\n\n${verdict}\n`,
      data: { tier, ...(tier === 'container' ? { runtime } : {}), concurrency: best.concurrency, seconds: best.seconds, created: best.created, perSecond: best.perSecond, p50Ms: best.p50Ms, p99Ms: best.p99Ms, errors: best.errors, cli, ...(cli ? { client } : {}), warmPool: false, rows }
    }, a.string('out'))
  } finally {
    await node.stopDaemon().catch(() => {})
    cpu.close()
    await rm(work, { recursive: true, force: true }).catch(() => {})
  }
}

await main()
