/**
 * The layerd side of one simulated node: a LAYERD_HOME on the node's disk
 * (its own daemon, chunk cache, state and sandbox disks), reading one store
 * (file:// or s3:// through the node's throttle), running containers in the
 * container tier (runc over an overlay on the lazily fetched image).
 *
 * Two launchers, one code path below them (createSandbox):
 * - 'library': the node's orchestrator process calls createSandbox →
 *   exec → destroy, as a node agent would; the task is done when exec
 *   returns, teardown follows.
 * - 'cli': one `layerctl run --tier container IMAGE -- CMD` process per
 *   container, as a shell script would (adds a node process start each,
 *   and the sandbox's teardown before the command returns).
 *
 * Bench-only: may import anything.
 */
import { mkdir } from 'node:fs/promises'
import { ControlClient } from '../../src/daemon/client/control-client.js'
import { socketPath, type NodeStats } from '../../src/daemon/client/control-protocol.js'
import { connectDaemon, runningDaemonPid } from '../../src/daemon/client/daemon-launcher.js'
import { createSandbox } from '../../src/sandbox/create-sandbox.js'
import { LAYERCTL_JS } from '../bench-report.js'
import { runProgram, type CommandResult } from '../../fixtures/run-command.js'
import { peakRssOf } from './docker-node.js'

export type Launcher = 'library' | 'cli'

export interface LayerdNodeOptions {
  home: string
  store: string
  s3Endpoint?: string
  launcher: Launcher
}

export interface TaskRun {
  stdout: string
  exitCode: number
  /** ms from the call to the task's completion (exec returned / layerctl exited). */
  readyMs: number
  /** ms until the sandbox is gone too. */
  doneMs: number
}

/** The daemon's node-wide counters (`layerctl stats --json` without a mount). */
export interface NodeFetchTotals { fetchedBytes: number, fetches: number, corruptChunks: number, storeErrors: number }

const STOP_TIMEOUT_MS = 30_000

export class LayerdNode {
  readonly opts: LayerdNodeOptions
  #pid = 0

  private constructor (opts: LayerdNodeOptions) {
    this.opts = opts
  }

  /** Start the node's daemon (cold cache) and wait until it answers. Async. */
  static async start (opts: LayerdNodeOptions): Promise<LayerdNode> {
    await mkdir(opts.home, { recursive: true, mode: 0o700 })
    const node = new LayerdNode(opts)
    const client = await connectDaemon({ home: opts.home })
    try {
      node.#pid = (await client.call('ping')).pid
    } finally {
      client.close()
    }
    return node
  }

  get pid (): number { return this.#pid }

  /** Run `cmd` in a new container-tier sandbox of `image`, and remove the sandbox. Async; rejects when the sandbox cannot be made. */
  async runTask (image: string, cmd: string[]): Promise<TaskRun> {
    const t0 = performance.now()
    if (this.opts.launcher === 'cli') {
      const r = await this.#layerctl(['run', '--tier', 'container', image, '--', ...cmd])
      const ms = performance.now() - t0
      if (r.code === 125) throw new Error(`layerctl run ${image} failed: ${r.stderr.trim()}`)
      return { stdout: r.stdout, exitCode: r.code, readyMs: ms, doneMs: ms }
    }
    const sandbox = await createSandbox({
      image, tier: 'container', home: this.opts.home, store: this.opts.store,
      ...(this.opts.s3Endpoint === undefined ? {} : { s3Endpoint: this.opts.s3Endpoint })
    })
    let result: { stdout: string, exitCode: number, readyMs: number }
    try {
      const r = await sandbox.exec({ cmd })
      result = { stdout: r.stdout.toString(), exitCode: r.exitCode, readyMs: performance.now() - t0 }
    } finally {
      await sandbox.destroy()
    }
    return { ...result, doneMs: performance.now() - t0 }
  }

  /** Node-wide fetch counters. Async. */
  async fetchTotals (): Promise<NodeFetchTotals> {
    const client = await ControlClient.connect(socketPath(this.opts.home))
    try {
      return (await client.call('stats', {}) as NodeStats).fetch
    } finally {
      client.close()
    }
  }

  /** The daemon's peak resident set (VmHWM), bytes. */
  async peakRss (): Promise<number> { return await peakRssOf(this.#pid) }

  /** SIGTERM the daemon (it unmounts its images) and wait for it to exit. Idempotent. Async. */
  async stop (): Promise<void> { await stopLayerd(this.opts.home) }

  async #layerctl (args: string[]): Promise<CommandResult> {
    const env = {
      ...process.env,
      LAYERD_HOME: this.opts.home,
      LAYERD_STORE: this.opts.store,
      ...(this.opts.s3Endpoint === undefined ? {} : { LAYERD_S3_ENDPOINT: this.opts.s3Endpoint })
    }
    return await runProgram(process.execPath, [LAYERCTL_JS, ...args], env)
  }
}

/** SIGTERM the daemon of `home`, if one runs, and wait for it to exit. Async; rejects when it does not stop in time. */
export async function stopLayerd (home: string): Promise<void> {
  const pid = runningDaemonPid(home)
  if (pid === undefined) return
  process.kill(pid, 'SIGTERM')
  const deadline = Date.now() + STOP_TIMEOUT_MS
  while (Date.now() < deadline) {
    try { process.kill(pid, 0) } catch { return }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  throw new Error(`layerd ${pid} (home ${home}) did not stop within ${STOP_TIMEOUT_MS} ms`)
}
