/**
 * containerd start benchmark (issue 13): a cold node starts N containers of
 * per-task images (the deploy corpus, bench/deploy/corpus.ts; by default
 * each container its own image, K = N) through a real containerd 1.6, two
 * ways, side by side in one run, each through the deploy benchmark's
 * throttle (bench/deploy/throttle-proxy.ts, one link model for both):
 *
 * - overlayfs: containerd's own overlayfs snapshotter. `ctr image pull`
 *   from the loopback registry (once per image, shared by its containers:
 *   a full pull and unpack), then `ctr run --rm`.
 * - layerd: the layerd snapshotter. `layerctl containerd pull` (once per
 *   image: manifest and config into containerd, every layer a remote
 *   snapshot; a call to the running layerd), then `ctr run --rm`. Chunks
 *   come from the S3 store (s3rver) through the node's throttle, on demand.
 *   The pull goes through layerctl's C front (served by layerd's run
 *   socket), or with `--pull-client node` through the Node CLI.
 *
 *   node dist/bench/containerd-start.js [--containers N] [--images K (default N)] [--concurrency C]
 *        [--bandwidth 1g] [--rtt-ms 1] [--task load|read-all] [--pull-client front|node] [--out DIR]
 *
 * Each side gets a fresh node disk (bench/deploy/node-disk.ts: containerd's
 * root and layerd's home and cache on it), so "bytes written" is that
 * disk's own count. "Time to task finished" runs from a container's deploy
 * start to `ctr run --rm` returning (its task's output printed and the
 * task gone). A **cold** container is the first of its image on the node:
 * its time is the image's pull plus its run, pull to first output. With
 * K = N every container is cold, and that is the figure the target
 * is checked on. With K < N the later containers of an image are **warm**
 * (the image is on the node, they wait for no pull of their own) and are
 * reported apart. Every output is checked.
 * With CTRB_TRACE=1 in the environment it logs each pull (the lazy one
 * with its phases, from `layerctl containerd pull --json`) and each
 * `ctr run`.
 *
 * Bench-only: may import anything.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { basename, join, resolve } from 'node:path'
import { ContainerdInstance } from '../fixtures/containerd.js'
import { LAYERCTL_FRONT, layerdNode, run } from '../fixtures/layerd-harness.js'
import { mountsUnder, unmountAllUnder } from '../src/host/mount-table.js'
import { snapshotterSocketPath } from '../src/snapshotter/containerd-snapshotter.js'
import { ControlClient } from '../src/daemon/client/control-client.js'
import { socketPath, type MountStats } from '../src/daemon/client/control-protocol.js'
import { fmt, loadAverage, markdownTable, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { ensureDeployCorpus, type TaskImage } from './deploy/corpus.js'
import { describeLink, parseBandwidth, type LinkSpec } from './deploy/link-model.js'
import { NodeDisk } from './deploy/node-disk.js'
import { placeContainers, quantile, runWithConcurrency, type Placement } from './deploy/schedule.js'
import { prepareImageSources, type ImageSources } from './deploy/stores.js'
import { deployTask, type DeployTask } from './deploy/tasks.js'
import { ThrottleProxy } from './deploy/throttle-proxy.js'

type Side = 'overlayfs' | 'layerd'
const SIDES: Side[] = ['overlayfs', 'layerd']
const DISK_BYTES = 16 * 1024 ** 3
const OPS_KEYS = ['lookups', 'opens', 'reads', 'readdirs', 'fetchReads', 'syncReads'] as const

/** One container: its time to task finished, whether it was its image's first on the node (cold), and its `ctr run`'s own time. */
interface ContainerRun { index: number, cold: boolean, readyMs: number, runMs: number }
/** One layerd mount: what the containers asked of it through FUSE (a remote snapshot's top layer, or a shared base). */
interface MountOps { image: string, lookups: number, opens: number, reads: number, readdirs: number, fetchReads: number, syncReads: number }
interface SideRun { side: Side, seconds: number, containers: ContainerRun[], pullMs: number[], bytesFetched: number, bytesWritten: number, outputs: Record<string, string>, topMounts?: MountOps[], baseMounts?: MountOps[] }

interface Ctx { work: string, link: LinkSpec, task: DeployTask, concurrency: number, sources: ImageSources, pullClient: 'front' | 'node', log: (line: string) => void }

const log = (line: string): void => { process.stderr.write(`containerd-start: ${line}\n`) }

const SPEC = {
  containers: { type: 'string', default: '8', value: 'N' },
  images: { type: 'string', default: '', value: 'N' },
  concurrency: { type: 'string', default: '4', value: 'N' },
  bandwidth: { type: 'string', default: '1g', value: 'BITS/S' },
  'rtt-ms': { type: 'string', default: '1', value: 'MS' },
  task: { type: 'string', default: 'load', value: 'TASK' },
  'pull-client': { type: 'string', default: 'front', value: 'front|node' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('containerd-start', SPEC)

function check (p: Placement<TaskImage>, side: Side, task: DeployTask, code: number, stdout: string, stderr: string, outputs: Record<string, string>): void {
  const line = stdout.trim().split('\n')[0] ?? ''
  if (code !== 0 || !line.startsWith(task.expectedPrefix(p.task))) {
    throw new Error(`${side} container ${p.index} (${p.task.ref}): exit ${code}, output ${JSON.stringify(stdout.slice(0, 200))}, stderr ${JSON.stringify(stderr.slice(-300))}`)
  }
  if (outputs[p.task.ref] !== undefined && outputs[p.task.ref] !== line) throw new Error(`${side} ${p.task.ref}: output differs between containers`)
  outputs[p.task.ref] = line
}

/** One side on a fresh node disk: containerd (and layerd), the throttle in front of its source, the containers, the figures. */
async function runSide (ctx: Ctx, side: Side, placements: Array<Placement<TaskImage>>): Promise<SideRun> {
  const nodeDir = await mkdtemp(join(ctx.work, `${side}-`))
  const disk = await NodeDisk.create(nodeDir, DISK_BYTES)
  const upstreamPort = side === 'overlayfs' ? ctx.sources.registry.port : ctx.sources.s3rver.port
  const proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort, link: ctx.link, name: side })
  const home = join(disk.mountpoint, 'layerd')
  const node = layerdNode(home, { store: ctx.sources.s3Store, env: { LAYERD_S3_ENDPOINT: `http://${proxy.hostPort}` } })
  let containerd: ContainerdInstance | undefined
  try {
    if (side === 'layerd') await node.startDaemon()
    // Sockets and state off the node disk (short paths); content and snapshots on it.
    containerd = await ContainerdInstance.start({ dir: await mkdtemp('/tmp/ctrb-'), root: join(disk.mountpoint, 'containerd'), snapshotterSocket: snapshotterSocketPath(home) })
    const c = containerd
    await disk.markBaseline()
    const prepared = new Map<string, Promise<void>>()
    const pullMs: number[] = []
    const containers: ContainerRun[] = []
    const prepare = async (t: TaskImage): Promise<void> => {
      const t0 = performance.now()
      const r = side === 'overlayfs'
        ? await c.ctr('images', 'pull', '--plain-http', '--snapshotter', 'overlayfs', `${proxy.hostPort}/${t.ref}`)
        : ctx.pullClient === 'front'
          ? await run(LAYERCTL_FRONT, ['containerd', 'pull', t.ref, '--address', c.address, '--json'], node.env)
          : await node.layerctl('containerd', 'pull', t.ref, '--address', c.address, '--json')
      if (r.code !== 0) throw new Error(`${side}: pulling ${t.ref}: ${r.stderr.trim().slice(-500)}`)
      pullMs.push(performance.now() - t0)
      if (process.env.CTRB_TRACE !== undefined) ctx.log(`${side} pull ${t.ref}: ${fmt((performance.now() - t0) / 1000)} s${side === 'layerd' ? ' ' + r.stdout.trim() : ''}`)
    }
    const outputs: Record<string, string> = {}
    const { seconds } = await runWithConcurrency(placements, ctx.concurrency, async p => {
      const t0 = performance.now()
      let pull = prepared.get(p.task.ref)
      const cold = pull === undefined
      if (pull === undefined) { pull = prepare(p.task); prepared.set(p.task.ref, pull) }
      await pull
      const image = side === 'overlayfs' ? `${proxy.hostPort}/${p.task.ref}` : p.task.ref
      const t1 = performance.now()
      const r = await c.ctr('run', '--rm', '--snapshotter', side, image, `${side}-${p.index}`, ...ctx.task.command)
      const runMs = performance.now() - t1
      if (process.env.CTRB_TRACE !== undefined) ctx.log(`${side} ctr run ${p.index} (${cold ? 'cold' : 'warm'}): ${fmt(runMs / 1000)} s`)
      const readyMs = performance.now() - t0
      check(p, side, ctx.task, r.code, r.stdout, r.stderr, outputs)
      containers.push({ index: p.index, cold, readyMs, runMs })
      return { readyMs }
    })
    const figures = await disk.figures()
    const ops = side === 'layerd' ? await layerdMountOps(home) : undefined
    return { side, seconds, containers: containers.sort((a, b) => a.index - b.index), pullMs, bytesFetched: proxy.stats().bytesDown, bytesWritten: figures.writtenBytes, outputs, ...(ops === undefined ? {} : { topMounts: ops.tops, baseMounts: ops.bases }) }
  } finally {
    await containerd?.stop()
    if (containerd !== undefined) await rm(containerd.dir, { recursive: true, force: true })
    await node.stopDaemon()
    await proxy.close()
    await unmountAllUnder(disk.mountpoint).catch(() => {})
    await disk.destroy()
    await rm(nodeDir, { recursive: true, force: true })
  }
}

/** The FUSE requests each mount of the layerd node at `home` served (after the runs; not timed): the remote snapshots' mounts, and the shared bases under `<home>/images`. Async. */
async function layerdMountOps (home: string): Promise<{ tops: MountOps[], bases: MountOps[] }> {
  const client = await ControlClient.connect(socketPath(home))
  const opsOf = async (mountpoint: string): Promise<MountOps | undefined> => {
    const s = await client.call('stats', { mountpoint }) as MountStats
    const f = s.fuseOps
    return f === undefined ? undefined : { image: s.image, lookups: f.lookups, opens: f.opens, reads: f.reads, readdirs: f.readdirs, fetchReads: s.fetchReads, syncReads: s.syncReads }
  }
  try {
    const tops = (await Promise.all((await client.call('mounts')).map(async m => await opsOf(m.mountpoint)))).filter(o => o !== undefined)
    const baseDirs = (await mountsUnder(join(home, 'images'))).filter(p => basename(p).startsWith('base-'))
    const bases = (await Promise.all(baseDirs.map(opsOf))).filter(o => o !== undefined)
    return { tops, bases }
  } finally {
    client.close()
  }
}

async function main (): Promise<void> {
  const containers = ARGS.number('containers', { min: 1 })
  const images = ARGS.string('images') === '' ? containers : ARGS.number('images', { min: 1 })
  if (images > containers) throw new Error(`--images ${images} is more than --containers ${containers}: some images would never run`)
  const concurrency = ARGS.number('concurrency', { min: 1 })
  const link: LinkSpec = { bitsPerSecond: parseBandwidth(ARGS.string('bandwidth')), rttMs: ARGS.number('rtt-ms', { integer: false }) }
  const task = deployTask(ARGS.string('task'))
  const pullClient = ARGS.string('pull-client')
  if (pullClient !== 'front' && pullClient !== 'node') throw new Error(`--pull-client takes front or node, got ${JSON.stringify(pullClient)}`)
  const command = `node dist/bench/containerd-start.js ${process.argv.slice(2).join(' ')}`.trim()
  log(`${containers} containers, ${images} images, concurrency ${concurrency}, link ${describeLink(link)}, task ${task.kind}, pull by the ${pullClient === 'front' ? 'C front' : 'Node CLI'}; load ${loadAverage()}`)
  const corpus = await ensureDeployCorpus(images, log)
  const work = await mkdtemp('/var/tmp/layerd-ctrb-')
  let sources: ImageSources | undefined
  try {
    sources = await prepareImageSources(work, corpus, log)
    const ctx: Ctx = { work, link, task, concurrency, sources, pullClient, log }
    const placements = placeContainers(containers, 1, corpus.tasks.slice(0, images))[0]!
    const load = startLoadSampler()
    const runs = new Map<Side, SideRun>()
    const ms = (r: SideRun, cold: boolean): number[] => r.containers.filter(c => c.cold === cold).map(c => c.readyMs)
    const q = (xs: number[], at: number): number => quantile(xs, at) / 1000
    for (const side of SIDES) {
      const r = await runSide(ctx, side, placements)
      log(`${side}: ${containers} containers in ${fmt(r.seconds, 1)} s, cold p50 ${fmt(q(ms(r, true), 0.5))} s, fetched ${fmt(r.bytesFetched / 1e6, 1)} MB, written ${fmt(r.bytesWritten / 1e6, 1)} MB`)
      runs.set(side, r)
    }
    const o = runs.get('overlayfs')!
    const l = runs.get('layerd')!
    for (const ref of Object.keys(o.outputs)) {
      if (o.outputs[ref] !== l.outputs[ref]) throw new Error(`${ref}: the two sides printed different results: ${o.outputs[ref]} / ${l.outputs[ref]}`)
    }
    const runOf = (r: SideRun, cold: boolean): number[] => r.containers.filter(c => c.cold === cold).map(c => c.runMs)
    const warmCount = ms(o, false).length
    const rows = [o, l].map(r => [
      r.side === 'layerd' ? 'containerd + layerd snapshotter (lazy)' : 'containerd + overlayfs (full pull)',
      fmt(q(ms(r, true), 0.5)), fmt(q(ms(r, true), 0.99)),
      ...(warmCount > 0 ? [fmt(q(ms(r, false), 0.5)), fmt(q(ms(r, false), 0.99))] : []),
      fmt(r.seconds, 1), fmt(quantile(r.pullMs, 0.5) / 1000), fmt(q(runOf(r, true), 0.5)),
      fmt(r.bytesFetched / 1e6, 1), fmt(r.bytesWritten / 1e6, 1)
    ])
    const ratio = (cold: boolean, at: number): number => q(ms(o, cold), at) / q(ms(l, cold), at)
    const speedP50 = ratio(true, 0.5)
    const speedP99 = ratio(true, 0.99)
    const writes = o.bytesWritten / Math.max(1, l.bytesWritten)
    const fetched = o.bytesFetched / Math.max(1, l.bytesFetched)
    const coldCount = ms(o, true).length
    const markdown = [
      `${containers} containers of ${images} per-task images on one cold node, concurrency ${concurrency}, link ${describeLink(link)}, task \`${task.kind}\` (${task.summary}); layerd's pulls by ${pullClient === 'front' ? 'layerctl\'s C front (layerd\'s run socket)' : 'the Node CLI'}. ` +
        `Cold: the first container of its image on the node, timed from its image's pull to its task finished (${coldCount} per side)` +
        (warmCount > 0 ? `; warm: a later container of an image already on the node (${warmCount} per side).` : '; every container is cold (its own image).'),
      '',
      markdownTable(['side', 'cold p50 s to task finished', 'cold p99 s', ...(warmCount > 0 ? ['warm p50 s', 'warm p99 s'] : []), 'node wall s', 'median pull s (per image)', 'median cold `ctr run` s', 'MB fetched', 'MB written'], rows),
      '',
      `- layerd vs overlayfs, cold (pull to task finished): **${fmt(speedP50)}x** faster at p50, ${fmt(speedP99)}x at p99 (target ≥ 3x: ${speedP50 >= 3 ? '✓' : '✗'}); ` +
        `**${fmt(writes, 1)}x** fewer bytes written (target ≥ 5x: ${writes >= 5 ? '✓' : '✗'}); ${fmt(fetched, 1)}x fewer bytes fetched.`,
      ...(warmCount > 0 ? [`- Warm (the image already on the node; no pull of its own): ${fmt(ratio(false, 0.5))}x at p50, ${fmt(ratio(false, 0.99))}x at p99.`] : []),
      ...(l.topMounts === undefined || l.topMounts.length === 0
        ? []
        : [`- FUSE requests per image's top-layer mount (layerd; ${l.topMounts.length} mounts; medians): ` +
          OPS_KEYS.map(k => `${k} ${fmt(quantile(l.topMounts!.map(m => m[k]), 0.5), 0)}`).join(', ') + '.']),
      ...(l.baseMounts === undefined || l.baseMounts.length === 0
        ? []
        : [`- FUSE requests of the shared base mounts, all ${l.topMounts?.length ?? 0} containers together (${l.baseMounts.length} base(s)): ` +
          OPS_KEYS.map(k => `${k} ${l.baseMounts!.reduce((n, m) => n + m[k], 0)}`).join(', ') + '.']),
      '- Every container\'s output was checked, and both sides printed the same result per image.'
    ].join('\n')
    await writeReport({
      name: 'containerd-start',
      title: 'containerd start: layerd snapshotter (lazy) vs overlayfs after a full pull',
      command,
      load: load.stop(),
      markdown,
      data: { containers, images, concurrency, link, task: task.kind, pullClient, runs: Object.fromEntries(runs), speedP50, speedP99, writesRatio: writes, fetchedRatio: fetched }
    }, ARGS.string('out'))
  } finally {
    await sources?.stop().catch(err => log(`cleanup: ${(err as Error).message}`))
    await unmountAllUnder(work).catch(() => {})
    await rm(work, { recursive: true, force: true })
  }
}

await mkdir(resolve(ARGS.string('out')), { recursive: true })
await main()
