/**
 * One node's deploy on one side, measured, as a session that runs its
 * containers in blocks: a fresh node disk, the side's daemons started (not
 * timed: a node is up before work arrives), the node's own throttle in
 * front of the registry or store; then `runBlock()` as often as the caller
 * likes (deploy.ts interleaves the sides' blocks, so load drifts hit both
 * alike); then `finish()` for the figures:
 *
 * - seconds: the node's wall time inside its blocks (time spent on the
 *   other side's blocks is not the node's); timings are on that clock too
 * - bytesTransferred: registry/store → node bytes through the node's
 *   throttle (Docker, layerd on S3); for layerd on the fs store, which has
 *   no network, the chunk bytes the daemon fetched plus the metadata
 *   objects (refs, manifests, TOCs) of the images it ran
 * - bytesWritten / footprintBytes: node-disk.ts
 * - peakRssBytes: the node's daemons' VmHWM (dockerd + containerd; layerd)
 * - series: node-series.ts samples (RSS, fds, mounts, loop devices) taken
 *   while the node's blocks run
 *
 * Every container's output is checked against the image's expected first
 * fields, so a side cannot be fast by doing less.
 *
 * Bench-only: may import anything.
 */
import { join } from 'node:path'
import type { LinkSpec } from './link-model.js'
import type { TaskImage } from './corpus.js'
import { DockerNode, rssSplitOf } from './docker-node.js'
import { type Launcher, LayerdNode, stopLayerd } from './layerd-node.js'
import type { LocalRegistry } from './local-registry.js'
import { NodeDisk } from './node-disk.js'
import { NodeSeries, type SeriesSample } from './node-series.js'
import { type ContainerTiming, type Placement, runWithConcurrency } from './schedule.js'
import type { DeployTask } from './tasks.js'
import { ThrottleProxy } from './throttle-proxy.js'

export type SideName = 'docker' | 'layerd' | 'layerdS3'

export interface BenchContext {
  /** Host directory for node disk images (not measured). */
  work: string
  /** Runtime state off the node disks (sockets, pid files). */
  runRoot: string
  link: LinkSpec
  concurrency: number
  launcher: Launcher
  /** What every container runs. */
  task: DeployTask
  diskBytes: number
  registry: LocalRegistry
  fsStore: string
  s3: { port: number, store: string }
  /** Bytes of the metadata objects (ref, manifest, TOCs) a node reads to run these images from the fs store. */
  fsMetadataBytes: (refs: string[]) => Promise<number>
  /** Tear-downs of the nodes now running, for an interrupted run. */
  cleanups: Set<() => Promise<void>>
  log: (line: string) => void
}

export interface NodeRun {
  side: SideName
  node: number
  containers: number
  seconds: number
  bytesTransferred: number
  /** Node → registry/store bytes (requests), where a throttle saw them. */
  bytesUploaded?: number
  /** Chunk payload the layerd daemon fetched, and in how many range GETs/reads (layerd sides). */
  chunkBytesFetched?: number
  fetches?: number
  /** The daemons' resident set at the end: anonymous vs file-backed (layerd's mapped cache pages count as RSS). */
  rssAtEnd: { anon: number, file: number }
  bytesWritten: number
  footprintBytes: number
  peakRssBytes: number
  rss: Record<string, number>
  /** Connections the throttle proxied. */
  connections?: number
  timings: ContainerTiming[]
  /** Resource samples through the run (node-series.ts). */
  series: SeriesSample[]
  /** First output line per image ref. */
  outputs: Record<string, string>
}

/** A started node of one side: run blocks of its containers, then finish (figures + teardown) or close (teardown only). */
export interface NodeSession {
  readonly side: SideName
  readonly node: number
  /** Containers deployed so far. */
  readonly done: number
  /** Seconds spent in blocks so far. */
  readonly seconds: number
  /** Deploy `placements` (at most ctx.concurrency at a time); rejects with the first failure. Async. */
  runBlock: (placements: Array<Placement<TaskImage>>) => Promise<void>
  /** The node's figures for every block run so far, then teardown. Async. */
  finish: () => Promise<NodeRun>
  /** Teardown without figures. Idempotent. Async. */
  close: () => Promise<void>
}

type Deploy = (p: Placement<TaskImage>) => Promise<{ readyMs: number }>

/** Check a task's output and record it per image; throws naming the container when it is wrong. */
function checkOutput (ctx: BenchContext, outputs: Record<string, string>, p: Placement<TaskImage>, side: SideName, exitCode: number, stdout: string): void {
  const line = stdout.trim().split('\n')[0] ?? ''
  const expected = ctx.task.expectedPrefix(p.task)
  if (exitCode !== 0 || !line.startsWith(expected)) {
    throw new Error(`${side} node ${p.node} container ${p.index} (${p.task.ref}): exit ${exitCode}, output ${JSON.stringify(stdout.slice(0, 300))}; expected "${expected}…"`)
  }
  const seen = outputs[p.task.ref]
  if (seen !== undefined && seen !== line) throw new Error(`${side} container ${p.index} (${p.task.ref}): output ${line} differs from an earlier run: ${seen}`)
  outputs[p.task.ref] = line
}

interface SideParts {
  deploy: Deploy
  /** The side's daemon pids, sampled by the series. */
  pids: () => Record<string, number>
  /** Side-specific figures at the end. */
  figures: () => Promise<Pick<NodeRun, 'bytesTransferred' | 'peakRssBytes' | 'rss' | 'rssAtEnd' | 'chunkBytesFetched' | 'fetches'>>
}

/** The block runner and bookkeeping both sides share; `parts` is the side's daemons, `cleanup` its teardown. */
function session (ctx: BenchContext, side: SideName, node: number, disk: NodeDisk, proxy: ThrottleProxy | undefined,
  parts: SideParts, outputs: Record<string, string>, cleanup: () => Promise<void>): NodeSession {
  let closed: Promise<void> | undefined
  const close = async (): Promise<void> => { closed ??= cleanup(); ctx.cleanups.delete(close); await closed }
  ctx.cleanups.add(close)
  const timings: ContainerTiming[] = []
  const series = new NodeSeries(disk.mountpoint, parts.pids)
  let activeMs = 0
  return {
    side,
    node,
    get done () { return timings.length },
    get seconds () { return activeMs / 1000 },
    runBlock: async placements => {
      const base = activeMs
      const t0 = performance.now()
      const stop = series.sampleEvery(() => ({ done: timings.length, seconds: (base + performance.now() - t0) / 1000 }))
      try {
        const r = await runWithConcurrency(placements, ctx.concurrency, parts.deploy)
        for (const t of r.timings) timings.push({ ...t, startMs: t.startMs + base, endMs: t.endMs + base })
        activeMs = base + r.seconds * 1000
      } finally {
        await stop()
      }
    },
    finish: async () => {
      try {
        const f = await parts.figures()
        const disky = await disk.figures()
        const net = proxy?.stats()
        return {
          side, node, containers: timings.length, seconds: activeMs / 1000,
          ...f,
          ...(net === undefined ? {} : { bytesUploaded: net.bytesUp, connections: net.connections }),
          bytesWritten: disky.writtenBytes, footprintBytes: disky.footprintBytes,
          timings: [...timings].sort((a, b) => a.index - b.index), series: series.samples, outputs
        }
      } finally {
        await close()
      }
    },
    close
  }
}

/** Start a Docker node: `docker pull` (once per image per node, shared by its containers) + `docker run`, then `docker rm`. Async. */
export async function startDockerNode (ctx: BenchContext, node: number): Promise<NodeSession> {
  const disk = await NodeDisk.create(join(ctx.work, `docker-node-${node}`), ctx.diskBytes)
  const proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: ctx.registry.port, link: ctx.link })
  let docker: DockerNode | undefined
  const cleanup = async (): Promise<void> => {
    await docker?.stop()
    await proxy.close()
    await disk.destroy()
  }
  try {
    docker = await DockerNode.start({ dataDir: disk.mountpoint, runDir: join(ctx.runRoot, `docker-node-${node}`) })
  } catch (err) {
    await cleanup()
    throw err
  }
  const d = docker
  await disk.markBaseline()
  const pulls = new Map<string, Promise<void>>()
  const outputs: Record<string, string> = {}
  const deploy: Deploy = async p => {
    const t0 = performance.now()
    const ref = `${proxy.hostPort}/${p.task.ref}`
    let pull = pulls.get(ref)
    if (pull === undefined) { pull = d.pull(ref); pulls.set(ref, pull) }
    await pull
    const name = `deploy-${p.index}`
    const r = await d.docker('run', '--network', 'none', '--name', name, ref, ...ctx.task.command)
    const readyMs = performance.now() - t0
    const rm = await d.docker('rm', name)
    if (rm.code !== 0) throw new Error(`docker rm ${name}: ${rm.stderr.trim()}`)
    checkOutput(ctx, outputs, p, 'docker', r.code, r.stdout)
    return { readyMs }
  }
  const figures: SideParts['figures'] = async () => {
    const rss = await d.peakRss()
    return { bytesTransferred: proxy.stats().bytesDown, peakRssBytes: rss.dockerd + rss.containerd, rss, rssAtEnd: await d.rssSplit() }
  }
  return session(ctx, 'docker', node, disk, proxy, { deploy, pids: () => d.pids, figures }, outputs, cleanup)
}

/** Start a layerd node: createSandbox/`layerctl run --tier container` per container on a cold node; fs store (no network) or S3 through the node's throttle. Async. */
export async function startLayerdNode (ctx: BenchContext, side: 'layerd' | 'layerdS3', node: number): Promise<NodeSession> {
  const disk = await NodeDisk.create(join(ctx.work, `${side}-node-${node}`), ctx.diskBytes)
  const proxy = side === 'layerdS3' ? await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: ctx.s3.port, link: ctx.link }) : undefined
  const home = join(disk.mountpoint, 'layerd')
  const cleanup = async (): Promise<void> => {
    await stopLayerd(home)
    await proxy?.close()
    await disk.destroy()
  }
  let l: LayerdNode
  try {
    l = await LayerdNode.start({
      home,
      launcher: ctx.launcher,
      ...(proxy === undefined ? { store: ctx.fsStore } : { store: ctx.s3.store, s3Endpoint: `http://${proxy.hostPort}` })
    })
  } catch (err) {
    await cleanup()
    throw err
  }
  await disk.markBaseline()
  const outputs: Record<string, string> = {}
  const deploy: Deploy = async p => {
    const r = await l.runTask(p.task.ref, ctx.task.command)
    checkOutput(ctx, outputs, p, side, r.exitCode, r.stdout)
    return { readyMs: r.readyMs }
  }
  const figures: SideParts['figures'] = async () => {
    const fetch = await l.fetchTotals()
    const rss = await l.peakRss()
    const net = proxy?.stats()
    return {
      bytesTransferred: net !== undefined ? net.bytesDown : fetch.fetchedBytes + await ctx.fsMetadataBytes(Object.keys(outputs)),
      chunkBytesFetched: fetch.fetchedBytes, fetches: fetch.fetches,
      peakRssBytes: rss, rss: { layerd: rss }, rssAtEnd: await rssSplitOf(l.pid)
    }
  }
  // The library launcher runs createSandbox in this process, so its own fds and RSS are the node agent's and are sampled too.
  const pids = (): Record<string, number> => ctx.launcher === 'library' ? { layerd: l.pid, agent: process.pid } : { layerd: l.pid }
  return session(ctx, side, node, disk, proxy, { deploy, pids, figures }, outputs, cleanup)
}
