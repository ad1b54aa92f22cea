/**
 * Deploy benchmark (issue 5): N containers from K per-task images on M
 * simulated nodes, layerd (fs store and S3) side by side with a real
 * Docker engine pulling from a real registry, one network model for both.
 *
 *   npm run bench:deploy -- [--containers N] [--images K] [--nodes M] [--concurrency C]
 *                           [--out DIR] [--bandwidth 1g] [--rtt-ms 1]
 *                           [--launcher library|cli] [--task load|read-all]
 *                           [--sides docker,layerd,layerdS3]
 *                           [--parallel-nodes] [--node-disk-size 32G]
 *                           [--block N] [--name deploy]
 *
 * The pieces (bench/deploy/): corpus.ts (base + npm releases as task
 * images, the task), stores.ts (registry, fs store, S3 store, dedup),
 * node-runs.ts (one node on one side, measured), throttle-proxy.ts +
 * link-model.ts (the network), node-disk.ts (bytes written), schedule.ts
 * (placement, concurrency, time to ready), summary.ts + plot.ts (report).
 *
 * Nodes run one after another by default (this machine has 2 cores: M
 * nodes side by side would measure CPU contention, not a cluster). Every
 * node of every side is started first (not timed), then the containers run
 * in rounds: with --block B, round r deploys each node's containers
 * [rB, rB + B) on every side, the sides in alternating order, so load
 * drifts (other work on the machine) hit every side alike through a long
 * run; without it, one round holds each node's whole share. A node's time
 * is the sum of its own blocks (node-runs.ts).
 *
 * SIGINT/SIGTERM once: the run stops after the round in flight and reports
 * what ran, marked partial (twice: stop now, no report). A failed container
 * also ends the run with a partial report naming the failure.
 *
 * Writes DIR/NAME.json, NAME.md, NAME.png (readiness) and NAME-series.png
 * (RSS, fds, mounts, loop devices and seconds per container over the run).
 *
 * Bench-only: may import anything.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { cpus } from 'node:os'
import { basename, join, resolve } from 'node:path'
import { unmountAllUnder } from '../src/host/mount-table.js'
import { parseSize } from '../src/cli/human-units.js'
import { fmt, loadAverage, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'
import { benchArgs, type BenchArgs, type BenchOptions } from './bench-args.js'
import { ensureDeployCorpus } from './deploy/corpus.js'
import { describeLink, parseBandwidth, type LinkSpec } from './deploy/link-model.js'
import type { Launcher } from './deploy/layerd-node.js'
import { type BenchContext, type NodeRun, type NodeSession, startDockerNode, startLayerdNode, type SideName } from './deploy/node-runs.js'
import { NPM_PROJECTS } from './deploy/npm-projects.js'
import { plotReadiness } from './deploy/plot.js'
import { placeContainers } from './deploy/schedule.js'
import { plotSeries } from './deploy/series-plot.js'
import { growthTable, steadyTable } from './deploy/run-health.js'
import { prepareImageSources } from './deploy/stores.js'
import { type DeployTask, deployTask } from './deploy/tasks.js'
import { nodesTable, sidesTable, type SideSummary, SIDE_LABELS, summarizeSide } from './deploy/summary.js'

const ALL_SIDES: SideName[] = ['docker', 'layerd', 'layerdS3']

interface Options {
  containers: number
  images: number
  nodes: number
  concurrency: number
  out: string
  link: LinkSpec
  launcher: Launcher
  task: DeployTask
  sides: SideName[]
  parallelNodes: boolean
  diskBytes: number
  /** Containers per node per block; 0: one block per node. */
  block: number
  name: string
}

const SPEC = {
  containers: { type: 'string', default: '96', value: 'N' },
  images: { type: 'string', default: '24', value: 'N' },
  nodes: { type: 'string', default: '2', value: 'N' },
  concurrency: { type: 'string', default: '4', value: 'N' },
  sides: { type: 'string', default: ALL_SIDES.join(','), value: 'SIDE,…' },
  launcher: { type: 'string', default: 'library', value: 'library|cli' },
  'rtt-ms': { type: 'string', default: '1', value: 'MS' },
  bandwidth: { type: 'string', default: '1g', value: 'BITS/S' },
  'node-disk-size': { type: 'string', default: '32G', value: 'SIZE' },
  task: { type: 'string', default: 'read-all', value: 'TASK' },
  'parallel-nodes': { type: 'boolean' },
  block: { type: 'string', default: '0', value: 'N' },
  name: { type: 'string', default: 'deploy', value: 'NAME' },
  ...REPORT_OPTIONS
} satisfies BenchOptions

function parseOptions (args: BenchArgs): Options {
  const arg = (name: string): string => args.string(name)
  const positiveInt = (name: string): number => args.number(name, { min: 1 })
  const sides = arg('sides').split(',') as SideName[]
  for (const s of sides) if (!ALL_SIDES.includes(s)) throw new Error(`--sides: unknown side ${JSON.stringify(s)}; use ${ALL_SIDES.join(',')}`)
  const launcher = arg('launcher')
  if (launcher !== 'library' && launcher !== 'cli') throw new Error(`--launcher must be library or cli, got ${JSON.stringify(launcher)}`)
  const rttMs = args.number('rtt-ms', { min: 0, integer: false })
  const diskBytes = parseSize(arg('node-disk-size'))
  if (diskBytes === undefined) throw new Error(`--node-disk-size: use a size such as 32G`)
  return {
    containers: positiveInt('containers'),
    images: positiveInt('images'),
    nodes: positiveInt('nodes'),
    concurrency: positiveInt('concurrency'),
    out: resolve(arg('out')),
    link: { bitsPerSecond: parseBandwidth(arg('bandwidth')), rttMs },
    launcher,
    task: deployTask(arg('task')),
    sides,
    parallelNodes: args.flag('parallel-nodes'),
    diskBytes,
    block: args.number('block', { min: 0 }),
    name: nameArg(arg('name'))
  }
}

function nameArg (name: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) throw new Error(`--name: ${JSON.stringify(name)} is not a plain file stem (letters, digits, . _ -)`)
  return name
}

const log = (line: string): void => { process.stderr.write(`deploy: ${line}\n`) }
const mb = (b: number): string => `${fmt(b / 1e6, 1)} MB`

async function main (): Promise<void> {
  const opt = parseOptions(benchArgs('deploy', SPEC))
  const command = `npm run bench:deploy -- ${process.argv.slice(2).join(' ')}`.trim()
  log(`${opt.containers} containers, ${opt.images} images, ${opt.nodes} nodes, concurrency ${opt.concurrency}, link ${describeLink(opt.link)}, launcher ${opt.launcher}, task ${opt.task.kind}; load ${loadAverage()}`)
  const corpus = await ensureDeployCorpus(opt.images, log)
  const work = await mkdtemp('/var/tmp/layerd-deploy-')
  await mkdir('/run/layerd-deploy', { recursive: true })
  const runRoot = await mkdtemp('/run/layerd-deploy/r')
  const cleanups = new Set<() => Promise<void>>()
  let sources: Awaited<ReturnType<typeof prepareImageSources>> | undefined
  const teardown = async (): Promise<void> => {
    for (const c of [...cleanups]) await c().catch(err => log(`cleanup: ${(err as Error).message}`))
    await sources?.stop().catch(err => log(`cleanup: ${(err as Error).message}`))
    await unmountAllUnder(work).catch(err => log(`cleanup: ${(err as Error).message}`))
    await rm(work, { recursive: true, force: true })
    await rm(runRoot, { recursive: true, force: true })
  }
  let stopRequested = false
  const onSignal = (sig: string): void => {
    if (!stopRequested) {
      stopRequested = true
      log(`${sig}: stopping after the round in flight, then reporting what ran (${sig} again: stop now, no report)`)
      return
    }
    log(`${sig}: stopping the nodes and cleaning up`)
    void teardown().finally(() => process.exit(130))
  }
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal)
  try {
    sources = await prepareImageSources(work, corpus, log)
    const ctx: BenchContext = {
      work, runRoot, link: opt.link, concurrency: opt.concurrency, launcher: opt.launcher, task: opt.task, diskBytes: opt.diskBytes,
      registry: sources.registry, fsStore: sources.fsStore, s3: { port: sources.s3rver.port, store: sources.s3Store },
      fsMetadataBytes: sources.fsMetadataBytes, cleanups, log
    }
    const placements = placeContainers(opt.containers, opt.nodes, corpus.tasks)
    const sessions = new Map<string, NodeSession>()
    const key = (side: SideName, n: number): string => `${side}/${n}`
    for (let n = 0; n < opt.nodes; n++) {
      for (const side of opt.sides) {
        sessions.set(key(side, n), side === 'docker' ? await startDockerNode(ctx, n) : await startLayerdNode(ctx, side, n))
      }
    }
    const load = startLoadSampler()
    const wall = new Map<SideName, number>()
    const runStarted = performance.now()
    let failure: string | undefined
    const perNode = Math.max(...placements.map(p => p.length))
    const block = opt.block > 0 ? opt.block : perNode
    const rounds = Math.ceil(perNode / block)
    let roundsRun = 0
    try {
      if (opt.parallelNodes) {
        for (const side of opt.sides) {
          const t0 = performance.now()
          await Promise.all(placements.map(async (p, n) => { await sessions.get(key(side, n))!.runBlock(p) }))
          wall.set(side, (performance.now() - t0) / 1000)
        }
        roundsRun = 1
      } else {
        for (let r = 0; r < rounds && !stopRequested; r++) {
          for (let n = 0; n < opt.nodes; n++) {
            const order = (n + r) % 2 === 0 ? opt.sides : [...opt.sides].reverse()
            for (const side of order) {
              const part = placements[n]!.slice(r * block, (r + 1) * block)
              if (part.length > 0) await sessions.get(key(side, n))!.runBlock(part)
            }
          }
          roundsRun = r + 1
          if (rounds > 1) {
            const progress = opt.sides.map(side => {
              const ss = placements.map((_, n) => sessions.get(key(side, n))!)
              const done = ss.reduce((a, x) => a + x.done, 0)
              return `${side} ${done} in ${fmt(Math.max(...ss.map(x => x.seconds)), 0)} s`
            }).join(', ')
            log(`round ${r + 1}/${rounds}: ${progress}; ${fmt((performance.now() - runStarted) / 60000, 1)} min  [load ${loadAverage()}]`)
          }
        }
      }
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err)
      log(`run failed, reporting what ran: ${failure}`)
    }
    const runs = new Map<SideName, NodeRun[]>(opt.sides.map(s => [s, []]))
    for (let n = 0; n < opt.nodes; n++) {
      for (const side of opt.sides) {
        const r = await sessions.get(key(side, n))!.finish()
        log(`node ${n} ${side}: ${r.containers} containers in ${fmt(r.seconds, 1)} s, transferred ${mb(r.bytesTransferred)}, written ${mb(r.bytesWritten)}, ` +
          `peak RSS ${mb(r.peakRssBytes)}  [load ${loadAverage()}]`)
        runs.get(side)!.push(r)
      }
    }
    const loadFigures = load.stop()
    const wallMinutes = (performance.now() - runStarted) / 60000
    const partial = failure !== undefined || roundsRun < rounds
    checkSameOutputs(runs)

    const sides: Partial<Record<SideName, SideSummary>> = {}
    for (const [side, rs] of runs) sides[side] = summarizeSide(side, rs, wall.get(side))
    await mkdir(opt.out, { recursive: true })
    const png = join(opt.out, `${opt.name}.png`)
    const seriesPng = join(opt.out, `${opt.name}-series.png`)
    await plotReadiness(png, `${opt.containers} containers, ${opt.images} images, ${opt.nodes} nodes × ${opt.concurrency} slots, ${describeLink(opt.link)}`,
      Object.entries(sides).map(([name, s]) => ({ label: name, seconds: s.readiness })))
    await plotSeries(seriesPng, `${opt.containers} containers${partial ? ' (partial)' : ''}: resources and speed over the run, per node`,
      [...runs.values()].flat().map(r => ({ label: `${r.side} node ${r.node}`, samples: r.series, timings: r.timings })))

    const d = sources.dedup
    const params = {
      containers: opt.containers, images: opt.images, nodes: opt.nodes, concurrency: opt.concurrency,
      bandwidthBitsPerSecond: Number.isFinite(opt.link.bitsPerSecond) ? opt.link.bitsPerSecond : null, rttMs: opt.link.rttMs,
      network: describeLink(opt.link), launcher: opt.launcher, tier: 'container', runtime: 'runc', parallelNodes: opt.parallelNodes,
      sides: opt.sides, nodeDiskBytes: opt.diskBytes, block: opt.block, rounds, roundsRun, partial, failure: failure ?? null, wallMinutes, placement: 'node = i mod M; the j-th container of node n runs image (n + j) mod K', cpus: cpus().length, timeToReadyUnit: 's',
      base: 'Debian bookworm minbase + python3 (fixtures python-v1)',
      taskImages: corpus.tasks.map(t => ({ ref: t.ref, files: t.files, projectBytes: t.projectBytes, layerGzipBytes: t.layers.at(-1)!.size })),
      task: opt.task.kind,
      taskCommand: opt.task.command
    }
    const containersRun = Object.values(sides).map(s => s.containers)
    const markdown = [
      ...(partial
        ? [`**Partial run**: ${roundsRun} of ${rounds} rounds (${containersRun.join(' / ')} of ${opt.containers} containers per side)` +
            `${failure === undefined ? ', stopped by signal' : `; failed: ${failure}`}.`, '']
        : []),
      `Wall time of the whole run (both sides, interleaved${opt.block > 0 ? ` in blocks of ${opt.block} containers per node` : ''}; node set-up not included): ${fmt(wallMinutes, 1)} min.`,
      '',
      `${opt.containers} containers (container tier / docker run) from ${opt.images} per-task images on ${opt.nodes} simulated nodes, ` +
        `${opt.concurrency} deploys at a time per node; each node's link to the registry/store: ${describeLink(opt.link)} ` +
        '(a user-space TCP throttle per node; FIFO bandwidth shared by the node\'s connections, RTT/2 each way, 1 RTT per new connection).',
      '',
      sidesTable(sides),
      '',
      ...Object.entries(sides).map(([name, s]) => `- **${name}**: ${s.label}.`),
      '',
      'seconds: until every container has finished its task (slowest node; nodes are separate machines). ' +
        'Time to ready: from a container\'s deploy start (its slot on the node) to its task\'s end, pull/mount included. ' +
        'Written to disk: sectors written to each node\'s own loop-mounted ext4 disk (docker data root, layerd home), after syncfs. ' +
        'Left on disk: space in use on those disks at the end. Peak daemon RSS: VmHWM of dockerd + containerd, or of layerd, per node (largest node).',
      '',
      '## Per node',
      '',
      nodesTable(sides),
      '',
      `## Dedup of the ${d.images} task images`,
      '',
      `| | bytes |`,
      `|---|---|`,
      `| Σ of every image's Docker layers (gzip) | ${mb(d.dockerLayerBytesSum)} |`,
      `| distinct Docker layers (registry: base once) | ${mb(d.dockerDistinctLayerBytes)} |`,
      `| layerd store holding all of them (chunks zstd, TOCs, manifests) | ${mb(d.layerdStoreBytes)} |`,
      `| project layers alone, Docker (gzip) | ${mb(d.dockerTaskLayerBytes)} |`,
      `| what the project layers added to the layerd store | ${mb(d.layerdTaskBytes)} |`,
      '',
      `Dedup ratio (Σ Docker layer sizes ÷ layerd store): **${fmt(d.ratio, 1)}x**; against distinct Docker layers ${fmt(d.ratioVsDistinctLayers, 2)}x; ` +
        `project layers alone ${fmt(d.taskLayerRatio, 1)}x. Project trees: ${mb(d.projectPlainBytes)} uncompressed.`,
      '',
      `Corpus: ${NPM_PROJECTS.map(p => p.name).join(', ')} (successive releases, newest first, round robin); task \`${opt.task.kind}\`: ${opt.task.summary}; ` +
        'every output is checked, and equal across sides.',
      '',
      '## Over the run',
      '',
      'Seconds per container: node time ÷ containers over each node\'s first and last 1,000 / M completions (M nodes), and the ' +
        'spread of the same over every window of 1,000 through the run (coefficient of variation, windows after the first).',
      '',
      steadyTable(runs),
      '',
      'Resources on each node, sampled every 5 s of its blocks (daemons: dockerd + containerd, or layerd; agent: the bench process, ' +
        'which runs createSandbox for the layerd library launcher; mounts and loop devices on the node\'s disk). First sample, largest, last.',
      '',
      growthTable(runs),
      '',
      `Plots (beside this file): ${basename(png)} (readiness), ${basename(seriesPng)} (over the run)`
    ].join('\n')
    await writeReport({
      name: opt.name,
      title: 'Deploy benchmark: layerd vs docker pull + run',
      command,
      load: loadFigures,
      markdown,
      data: { ...sides, params, series: Object.fromEntries([...runs].map(([side, rs]) => [side, rs.map(r => r.series)])), dedup: d, pushes: sources.pushes, labels: SIDE_LABELS }
    }, opt.out)
  } finally {
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal)
    await teardown()
  }
}

/** Every image must print the same line on every side. */
function checkSameOutputs (runs: Map<SideName, NodeRun[]>): void {
  const seen = new Map<string, { side: string, line: string }>()
  for (const [side, rs] of runs) {
    for (const r of rs) {
      for (const [ref, line] of Object.entries(r.outputs)) {
        const s = seen.get(ref)
        if (s === undefined) seen.set(ref, { side, line })
        else if (s.line !== line) throw new Error(`${ref}: ${side} printed ${JSON.stringify(line)}, ${s.side} printed ${JSON.stringify(s.line)}`)
      }
    }
  }
}

main().catch(err => {
  process.stderr.write(`deploy: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
  process.exit(1)
})
