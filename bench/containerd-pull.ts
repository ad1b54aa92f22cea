/**
 * `layerctl containerd pull` alone (issue 13): the lazy pull of K per-task
 * images (the deploy corpus) into a real containerd 1.6, one at a time, by
 * two clients in turn (A B B A …) on one node, so that both see the same
 * node, load and cache:
 *
 * - front: layerctl's C front (native/layerctl.c), which hands the command
 *   to layerd's run socket; layerd's runner runs it (src/cli/run-socket-commands.ts);
 * - node: the Node CLI (`node dist/cli/layerctl.js`), a Node process per pull.
 *
 * Both end in the same `containerdPull` control call; the figure is the
 * wall time of the client process, and layerd's own time of the pull (its
 * `ms`), so the difference is what the client costs. Before the timed pulls,
 * the base image is pulled once through the front (not timed): that starts
 * layerd's runner and prepares the base's layers, which every task image
 * then finds already there, whoever pulls it.
 *
 *   node dist/bench/containerd-pull.js [--images K] [--out DIR]
 *
 * Bench-only: may import anything.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { ContainerdInstance } from '../fixtures/containerd.js'
import { LAYERCTL_ENTRY, LAYERCTL_FRONT, layerdNode, run, type LayerdNode } from '../fixtures/layerd-harness.js'
import { unmountAllUnder } from '../src/host/mount-table.js'
import { snapshotterSocketPath } from '../src/snapshotter/containerd-snapshotter.js'
import type { ContainerdPullResult } from '../src/daemon/client/control-protocol.js'
import { fmt, loadAverage, markdownTable, median, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { ensureDeployCorpus } from './deploy/corpus.js'
import { BASE_REF, prepareImageSources, type ImageSources } from './deploy/stores.js'

type Client = 'front' | 'node'
const CLIENT_LABEL: Record<Client, string> = { front: 'C front → layerd\'s run socket', node: 'Node CLI (a Node process per pull)' }

interface Pull { ref: string, client: Client, wallMs: number, layerdMs: number }

const log = (line: string): void => { process.stderr.write(`containerd-pull: ${line}\n`) }

const SPEC = {
  images: { type: 'string', default: '16', value: 'K' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('containerd-pull', SPEC)

/** A B B A A B B A …: each client as often first as second. */
function clientOf (i: number): Client {
  return i % 4 === 0 || i % 4 === 3 ? 'front' : 'node'
}

async function pullWith (client: Client, ref: string, address: string, env: NodeJS.ProcessEnv): Promise<Pull> {
  const args = ['containerd', 'pull', ref, '--address', address, '--json']
  const t0 = performance.now()
  const r = client === 'front' ? await run(LAYERCTL_FRONT, args, env) : await run(process.execPath, [LAYERCTL_ENTRY, ...args], env)
  const wallMs = performance.now() - t0
  if (r.code !== 0) throw new Error(`${client}: pulling ${ref}: exit ${r.code}: ${r.stderr.trim().slice(-500)}`)
  const result = JSON.parse(r.stdout) as ContainerdPullResult
  if (result.remote + result.alreadyThere !== result.layers) throw new Error(`${client}: ${ref}: not every layer is a remote snapshot: ${r.stdout}`)
  return { ref, client, wallMs, layerdMs: result.ms }
}

async function main (): Promise<void> {
  const images = ARGS.number('images', { min: 2 })
  const command = `node dist/bench/containerd-pull.js ${process.argv.slice(2).join(' ')}`.trim()
  log(`${images} images; load ${loadAverage()}`)
  const corpus = await ensureDeployCorpus(images, log)
  const work = await mkdtemp('/var/tmp/layerd-ctrp-')
  let sources: ImageSources | undefined
  let containerd: ContainerdInstance | undefined
  let node: LayerdNode | undefined
  try {
    sources = await prepareImageSources(work, corpus, log)
    const home = join(work, 'home')
    node = layerdNode(home, { store: sources.s3Store, env: { LAYERD_S3_ENDPOINT: sources.s3rver.endpoint } })
    await node.startDaemon()
    containerd = await ContainerdInstance.start({ dir: await mkdtemp('/tmp/ctrp-'), snapshotterSocket: snapshotterSocketPath(home) })
    await pullWith('front', BASE_REF, containerd.address, node.env)
    const load = startLoadSampler()
    const pulls: Pull[] = []
    for (const [i, t] of corpus.tasks.slice(0, images).entries()) {
      const p = await pullWith(clientOf(i), t.ref, containerd.address, node.env)
      log(`${p.client} ${t.ref}: ${fmt(p.wallMs / 1000)} s (layerd ${fmt(p.layerdMs / 1000)} s)`)
      pulls.push(p)
    }
    const of = (c: Client): Pull[] => pulls.filter(p => p.client === c)
    const rows = (['node', 'front'] as Client[]).map(c => {
      const ps = of(c)
      const wall = ps.map(p => p.wallMs)
      return [CLIENT_LABEL[c], String(ps.length), fmt(median(wall) / 1000), fmt(Math.min(...wall) / 1000), fmt(Math.max(...wall) / 1000),
        fmt(median(ps.map(p => p.layerdMs)) / 1000), fmt(median(ps.map(p => p.wallMs - p.layerdMs)) / 1000)]
    })
    const saved = median(of('node').map(p => p.wallMs)) - median(of('front').map(p => p.wallMs))
    const markdown = [
      `${images} per-task images pulled lazily into containerd one at a time, the two clients in turn (A B B A …) on one node; the base image pulled first (not timed).`,
      '',
      markdownTable(['client', 'pulls', 'median wall s', 'min s', 'max s', 'median layerd s (the pull itself)', 'median client s (wall − layerd)'], rows),
      '',
      `- The C front saves **${fmt(saved / 1000)} s** of the median pull (${fmt(median(of('node').map(p => p.wallMs)) / Math.max(1, median(of('front').map(p => p.wallMs))), 1)}x).`
    ].join('\n')
    await writeReport({
      name: 'containerd-pull',
      title: '`layerctl containerd pull` alone: the C front against the Node CLI',
      command,
      load: load.stop(),
      markdown,
      data: { images, pulls }
    }, ARGS.string('out'))
  } finally {
    await containerd?.stop()
    if (containerd !== undefined) await rm(containerd.dir, { recursive: true, force: true })
    await node?.stopDaemon().catch(() => {})
    await sources?.stop().catch(err => log(`cleanup: ${(err as Error).message}`))
    await unmountAllUnder(work).catch(() => {})
    await rm(work, { recursive: true, force: true })
  }
}

await mkdir(resolve(ARGS.string('out')), { recursive: true })
await main()
