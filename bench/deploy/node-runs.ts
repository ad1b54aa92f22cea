/**
 * One node's deploy on one side, measured: a fresh node disk, the side's
 * daemons started (not timed: a node is up before work arrives), the
 * node's own throttle in front of the registry or store, then the node's
 * containers (schedule.ts), then the figures:
 *
 * - seconds: the node's wall time from its first deploy to its last removal
 * - bytesTransferred: registry/store → node bytes through the node's
 *   throttle (Docker, layerd on S3); for layerd on the fs store, which has
 *   no network, the chunk bytes the daemon fetched plus the metadata
 *   objects (refs, manifests, TOCs) of the images it ran
 * - bytesWritten / footprintBytes: node-disk.ts
 * - peakRssBytes: the node's daemons' VmHWM (dockerd + containerd; layerd)
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
  /** Tear-downs of the nodes now running, for an interrupted run (each also runs normally in its finally). */
  cleanups: Set<() => Promise<void>>
  log: (line: string) => void
}

/** Run `body` with `cleanup` registered in ctx.cleanups, and always run `cleanup` once after it. */
async function withCleanup<T> (ctx: BenchContext, cleanup: () => Promise<void>, body: () => Promise<T>): Promise<T> {
  let done: Promise<void> | undefined
  const once = async (): Promise<void> => { done ??= cleanup(); await done }
  ctx.cleanups.add(once)
  try {
    return await body()
  } finally {
    ctx.cleanups.delete(once)
    await once()
  }
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
  /** First output line per image ref. */
  outputs: Record<string, string>
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

/** `docker pull` (once per image per node, shared by its containers) + `docker run`, then `docker rm`. */
export async function runDockerNode (ctx: BenchContext, node: number, placements: Array<Placement<TaskImage>>): Promise<NodeRun> {
  const disk = await NodeDisk.create(join(ctx.work, `docker-node-${node}`), ctx.diskBytes)
  const proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: ctx.registry.port, link: ctx.link })
  let docker: DockerNode | undefined
  const cleanup = async (): Promise<void> => {
    await docker?.stop()
    await proxy.close()
    await disk.destroy()
  }
  return await withCleanup(ctx, cleanup, async () => {
    docker = await DockerNode.start({ dataDir: disk.mountpoint, runDir: join(ctx.runRoot, `docker-node-${node}`) })
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
    const { seconds, timings } = await runWithConcurrency(placements, ctx.concurrency, deploy)
    const figures = await disk.figures()
    const rss = await d.peakRss()
    const rssAtEnd = await d.rssSplit()
    const net = proxy.stats()
    return {
      side: 'docker', node, containers: placements.length, seconds,
      bytesTransferred: net.bytesDown, bytesUploaded: net.bytesUp, connections: net.connections,
      bytesWritten: figures.writtenBytes, footprintBytes: figures.footprintBytes,
      peakRssBytes: rss.dockerd + rss.containerd, rss, rssAtEnd, timings, outputs
    }
  })
}

/** createSandbox/`layerctl run --tier container` per container on a cold node; fs store (no network) or S3 through the node's throttle. */
export async function runLayerdNode (ctx: BenchContext, side: 'layerd' | 'layerdS3', node: number, placements: Array<Placement<TaskImage>>): Promise<NodeRun> {
  const disk = await NodeDisk.create(join(ctx.work, `${side}-node-${node}`), ctx.diskBytes)
  const proxy = side === 'layerdS3' ? await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: ctx.s3.port, link: ctx.link }) : undefined
  const home = join(disk.mountpoint, 'layerd')
  const cleanup = async (): Promise<void> => {
    await stopLayerd(home)
    await proxy?.close()
    await disk.destroy()
  }
  return await withCleanup(ctx, cleanup, async () => {
    const l = await LayerdNode.start({
      home,
      launcher: ctx.launcher,
      ...(proxy === undefined ? { store: ctx.fsStore } : { store: ctx.s3.store, s3Endpoint: `http://${proxy.hostPort}` })
    })
    await disk.markBaseline()
    const outputs: Record<string, string> = {}
    const deploy: Deploy = async p => {
      const r = await l.runTask(p.task.ref, ctx.task.command)
      checkOutput(ctx, outputs, p, side, r.exitCode, r.stdout)
      return { readyMs: r.readyMs }
    }
    const { seconds, timings } = await runWithConcurrency(placements, ctx.concurrency, deploy)
    const fetch = await l.fetchTotals()
    const figures = await disk.figures()
    const rss = await l.peakRss()
    const rssAtEnd = await rssSplitOf(l.pid)
    const net = proxy?.stats()
    const bytesTransferred = net !== undefined ? net.bytesDown : fetch.fetchedBytes + await ctx.fsMetadataBytes(Object.keys(outputs))
    return {
      side, node, containers: placements.length, seconds,
      bytesTransferred, chunkBytesFetched: fetch.fetchedBytes, fetches: fetch.fetches,
      ...(net === undefined ? {} : { bytesUploaded: net.bytesUp, connections: net.connections }),
      bytesWritten: figures.writtenBytes, footprintBytes: figures.footprintBytes,
      peakRssBytes: rss, rss: { layerd: rss }, rssAtEnd, timings, outputs
    }
  })
}
