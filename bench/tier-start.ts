/**
 * Sandbox start latency per tier: N sequential create + exec(`true`) +
 * destroy from a warm lower, with the breakdown (create = overlay + quota
 * disk + cgroup; exec = runtime start and the command; destroy = kill,
 * unmount, remove), and the writable layer's own set-up/teardown cost per
 * quota kind.
 *
 *   node dist/bench/tier-start.js [--runs N] [--cases process,container,container-crun,microvm,vm]
 *                                 [--lower layerd|dir] [--quota loop-ext4|tmpfs] [--overlay-runs N] [--json OUT]
 *
 * Table-driven: a tier is one row of TIER_CASES, with its own default run
 * count (VM tiers: 5, after one warm-up boot). The lower of the process and
 * container tiers is, by default (`--lower layerd`), the Debian base image
 * pushed into a node store and mounted by a real layerd with a warm chunk
 * cache (`layerctl pull --all`), as createSandbox uses it; `--lower dir` uses
 * the fixture's rootfs directory instead. The VM
 * tiers boot its block view, built once per run (for a VM, create = overlay
 * disk + boot to the guest agent's READY). Prints a Markdown
 * table and the command; writes JSON (default bench/results/tier-start.json).
 *
 * Bench-only: may import anything.
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises'
import { cpus, loadavg } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { ensureGuestKernel, type GuestKernelFixture } from '../fixtures/guest-kernel.js'
import { layerdNode, type LayerdNode } from '../fixtures/layerd-harness.js'
import { buildBlockView } from '../src/blockview/block-view-builder.js'
import { ContainerTierDriver } from '../src/runtime/container/container-driver.js'
import { unmountAllUnder } from '../src/host/mount-table.js'
import { mountSandboxOverlay, removeSandboxOverlay, type QuotaKind } from '../src/runtime/overlay/sandbox-overlay.js'
import { ProcessTierDriver } from '../src/runtime/process/process-driver.js'
import { DEFAULT_LIMITS, type SandboxSpec, type TierDriver } from '../src/runtime/sandbox.js'
import { MicrovmTierDriver, VmTierDriver } from '../src/runtime/vm/vm-drivers.js'
import { benchArgs, benchUsage, type BenchOptions } from './bench-args.js'

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..')
const WARMUP_RUNS = 3

interface TierCase {
  name: string
  /** Sequential starts measured unless --runs says otherwise. */
  defaultRuns: number
  make: (quota: QuotaKind, kernel?: GuestKernelFixture) => TierDriver
  /** What the case needs from the image: the merged rootfs dir or a block view. */
  input: 'rootfs' | 'blockView'
  /** Unmeasured starts first (default WARMUP_RUNS). */
  warmupRuns?: number
}

/** The VM tiers boot Debian's kernel from the fixture (shared vmlinux/initrd cache); KVM is probed, TCG otherwise. */
const vmOptions = (k?: GuestKernelFixture): { kernel?: GuestKernelFixture['source'], cacheDir?: string } =>
  k === undefined ? {} : { kernel: k.source, cacheDir: k.preparedDir }

const TIER_CASES: TierCase[] = [
  { name: 'process', defaultRuns: 100, input: 'rootfs', make: quota => new ProcessTierDriver({ quota }) },
  { name: 'container', defaultRuns: 100, input: 'rootfs', make: quota => new ContainerTierDriver({ runtime: 'runc', quota }) },
  { name: 'container-crun', defaultRuns: 100, input: 'rootfs', make: quota => new ContainerTierDriver({ runtime: 'crun', quota }) },
  { name: 'microvm', defaultRuns: 5, warmupRuns: 1, input: 'blockView', make: (_q, k) => new MicrovmTierDriver(vmOptions(k)) },
  { name: 'vm', defaultRuns: 5, warmupRuns: 1, input: 'blockView', make: (_q, k) => new VmTierDriver(vmOptions(k)) }
]

interface Stats { p50: number, p99: number, mean: number, max: number }
function stats (xs: number[]): Stats {
  const s = [...xs].sort((a, b) => a - b)
  const at = (q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))]!
  return { p50: at(0.5), p99: at(0.99), mean: s.reduce((a, b) => a + b, 0) / s.length, max: s[s.length - 1]! }
}
const ms = (x: number): string => x.toFixed(1)

const SPEC = {
  runs: { type: 'string', value: 'N' },
  cases: { type: 'string', default: 'process,container,microvm,vm', value: 'TIER,…' },
  quota: { type: 'string', default: 'loop-ext4', value: 'loop-ext4|tmpfs' },
  lower: { type: 'string', default: 'layerd', value: 'layerd|dir' },
  'overlay-runs': { type: 'string', default: '30', value: 'N' },
  json: { type: 'string', default: join(REPO_ROOT, 'bench/results/tier-start.json'), value: 'FILE' }
} satisfies BenchOptions

function parseArgs (): { runs?: number, cases: string[], lower: 'layerd' | 'dir', quota: QuotaKind, overlayRuns: number, json: string } {
  const a = benchArgs('tier-start', SPEC)
  const oneOf = <T extends string>(name: string, allowed: readonly T[]): T => {
    const v = a.string(name)
    if (!(allowed as readonly string[]).includes(v)) {
      process.stderr.write(`tier-start: --${name} must be ${allowed.join(' or ')}, got ${JSON.stringify(v)}\n${benchUsage('tier-start', SPEC)}\n`)
      process.exit(2)
    }
    return v as T
  }
  const cases = a.string('cases').split(',')
  const known = TIER_CASES.map(c => c.name)
  for (const c of cases) if (!known.includes(c)) { process.stderr.write(`tier-start: --cases: unknown tier ${JSON.stringify(c)}; use ${known.join(',')}\n`); process.exit(2) }
  return {
    ...(a.optString('runs') !== undefined ? { runs: a.number('runs', { min: 1 }) } : {}),
    cases,
    quota: oneOf<QuotaKind>('quota', ['loop-ext4', 'tmpfs']),
    lower: oneOf('lower', ['layerd', 'dir'] as const),
    overlayRuns: a.number('overlay-runs', { min: 1 }),
    json: a.string('json')
  }
}

async function main (): Promise<void> {
  const opt = parseArgs()
  const command = `node dist/bench/tier-start.js ${process.argv.slice(2).join(' ')}`.trim()
  const images = await ensureDebianImages()
  const baseRootfs = images.images.base.rootfs
  const work = await mkdtemp('/var/tmp/layerd-tier-start-')
  let node: LayerdNode | undefined
  let lower = baseRootfs
  if (opt.lower === 'layerd') {
    node = layerdNode(join(work, 'home'))
    await node.startDaemon()
    lower = join(work, 'mnt')
    for (const args of [['push', baseRootfs, 'bench/base:v1'], ['mount', 'bench/base:v1', lower], ['pull', '--all', 'bench/base:v1']]) {
      const r = await node.layerctl(...args)
      if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')} failed: ${r.stderr}`)
    }
  }
  const load = loadavg()[0]!
  const results: Record<string, unknown> = {}
  const selected = TIER_CASES.filter(x => opt.cases.includes(x.name))
  const kernel = selected.some(c => c.input === 'blockView') ? await ensureGuestKernel() : undefined
  let blockView: string | undefined
  const lines = ['| case | runs | total p50 | total p99 | create p50 | exec(true) p50 | destroy p50 |', '|---|---|---|---|---|---|---|']
  try {
    for (const c of selected) {
      const driver = c.make(opt.quota, kernel)
      const why = await driver.unavailableReason()
      if (why !== undefined) { lines.push(`| ${c.name} | – | unavailable: ${why} | | | | |`); continue }
      // The VM tiers boot the base image's block view (a plain file here: start latency from a warm page cache).
      if (c.input === 'blockView') blockView ??= (await buildBlockView(baseRootfs, { uuidSeed: 'bench-tier-start', out: join(work, 'base.raw') })).path
      const runs = opt.runs ?? c.defaultRuns
      const warmups = c.warmupRuns ?? WARMUP_RUNS
      const t = { create: [] as number[], exec: [] as number[], destroy: [] as number[], total: [] as number[] }
      for (let i = 0; i < warmups + runs; i++) {
        const id = `bench-${c.name}-${i}`
        const image = c.input === 'rootfs' ? { rootfs: lower } : { blockView: blockView! }
        const spec: SandboxSpec = { id, imageName: 'debian:base', config: {}, ...image, stateDir: join(work, id), limits: { ...DEFAULT_LIMITS } }
        const t0 = performance.now()
        const sb = await driver.create(spec)
        const t1 = performance.now()
        const r = await sb.exec({ cmd: ['true'] })
        const t2 = performance.now()
        await sb.destroy()
        const t3 = performance.now()
        if (r.exitCode !== 0) throw new Error(`${c.name}: true exited ${r.exitCode}: ${r.stderr.toString()}`)
        if (i < warmups) continue
        t.create.push(t1 - t0); t.exec.push(t2 - t1); t.destroy.push(t3 - t2); t.total.push(t3 - t0)
      }
      const s = { create: stats(t.create), exec: stats(t.exec), destroy: stats(t.destroy), total: stats(t.total) }
      results[c.name] = { runs, quota: opt.quota, ...s }
      lines.push(`| ${c.name} | ${runs} | ${ms(s.total.p50)} | ${ms(s.total.p99)} | ${ms(s.create.p50)} | ${ms(s.exec.p50)} | ${ms(s.destroy.p50)} |`)
    }

    const overlayLines = ['| writable layer | runs | set-up p50 | set-up p99 | teardown p50 | teardown p99 |', '|---|---|---|---|---|---|']
    const overlay: Record<string, unknown> = {}
    for (const quota of ['loop-ext4', 'tmpfs'] as QuotaKind[]) {
      const up: number[] = []; const down: number[] = []
      for (let i = 0; i < opt.overlayRuns; i++) {
        const dir = join(work, `overlay-${quota}-${i}`)
        await mkdir(dir)
        const t0 = performance.now()
        await mountSandboxOverlay({ lower, stateDir: dir, diskBytes: DEFAULT_LIMITS.diskBytes, quota })
        const t1 = performance.now()
        await removeSandboxOverlay(dir)
        up.push(t1 - t0); down.push(performance.now() - t1)
      }
      const s = { setup: stats(up), teardown: stats(down) }
      overlay[quota] = { runs: opt.overlayRuns, diskBytes: DEFAULT_LIMITS.diskBytes, ...s }
      overlayLines.push(`| ${quota} (1 GiB) | ${opt.overlayRuns} | ${ms(s.setup.p50)} | ${ms(s.setup.p99)} | ${ms(s.teardown.p50)} | ${ms(s.teardown.p99)} |`)
    }
    results.writableLayer = overlay

    process.stdout.write(`${lines.join('\n')}\n\n${overlayLines.join('\n')}\n\n` +
      `Times in ms. Lower of the process and container tiers: ${opt.lower === 'layerd' ? 'a layerd FUSE mount of the base image, chunk cache warm' : 'the base rootfs directory'}. Quota kind for the tiers: ${opt.quota}. 1-minute load average at start: ${load.toFixed(2)} (${cpus().length} CPUs).\n` +
      `Command: ${command}\n`)
    await mkdir(dirname(opt.json), { recursive: true })
    await writeFile(opt.json, JSON.stringify({ command, date: new Date().toISOString(), loadAverage1m: load, lower, results }, null, 2) + '\n')
  } finally {
    if (node !== undefined) {
      await node.layerctl('umount', lower).catch(() => {})
      await node.stopDaemon().catch(() => {})
    }
    await unmountAllUnder(work) // a failed run may leave mounts; never rm into them
    await rm(work, { recursive: true, force: true })
  }
}

main().catch(err => {
  process.stderr.write(`tier-start: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
  process.exit(1)
})
