/**
 * A running layerd VM as a Sandbox: one hypervisor process (QEMU or
 * Firecracker), booted once, with the guest agent serving every exec over
 * one stream (a persistent VM, not a boot per exec). Files and processes
 * the guest keeps between execs stay until stop/destroy: writes land in the
 * VM's own copy-on-write disk, never in the block view.
 *
 * The guest's console and the hypervisor's own output go through
 * ConsoleSinks (capped files plus an in-memory tail): a guest printing to
 * its serial port forever cannot fill the host's disk.
 *
 * Lifecycle: `launchVm` listens on the agent socket, starts the hypervisor,
 * records its pid in `<stateDir>/<hypervisor>.pid` (for cleanup after a
 * crash of this process) and waits for READY. stop() asks the agent to
 * power off, then kills the hypervisor after a grace period; the disk stays.
 * destroy() also deletes the state.
 *
 * May import: src/errors.ts, ../sandbox.ts, ../process/exec-context.ts, this folder, node built-ins.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { rm, writeFile } from 'node:fs/promises'
import { createServer, type Server, type Socket } from 'node:net'
import { UnsupportedError, UsageError } from '../../errors.js'
import { DEFAULT_PATH, mergeEnv } from '../process/exec-context.js'
import type { ExecOptions, ExecResult, Sandbox, SandboxSpec, Tier } from '../sandbox.js'
import { AgentChannel, VmGoneError } from './agent-channel.js'
import { ConsoleSink } from './console-sink.js'
import type { GuestKernel } from './guest-kernel.js'

/** A guest that has not said READY by then is not going to (TCG on a loaded 2-core host: a boot takes 5-20 s). */
export const DEFAULT_BOOT_TIMEOUT_MS = 60_000

/** The guest did not reach its agent in time (as opposed to a hypervisor that would not start): worth one more try. */
export class VmBootTimeoutError extends UnsupportedError {}
const SHUTDOWN_GRACE_MS = 5000
/** After an exec's timeout, the agent has this long to report the killed command before the VM is killed. */
const KILL_GRACE_MS = 10_000

export interface HypervisorLaunch {
  /** 'qemu' or 'firecracker': names the pid file. */
  name: string
  argv: string[]
  /** The guest console's (capped) log file. */
  consoleFile: string
  /**
   * Unix socket the hypervisor's console chardev connects to (QEMU). Without
   * it the console is the hypervisor's stdout (Firecracker).
   */
  consoleSocket?: string
  /** The (capped) log of the hypervisor's own messages: stderr, and stdout when the console has its socket. */
  logFile: string
  /** Unix socket the host listens on for the agent's connection. */
  agentSocket: string
  /** What the vCPUs are doing, for the message of a boot that timed out. */
  diagnose?: () => Promise<string>
}

export interface VmTimings {
  /** From spawning the hypervisor to the agent's READY. */
  bootMs: number
  /** The guest's own uptime at READY, as it reported it. */
  guestUptimeMs: number
}

interface Sinks { console: ConsoleSink, log: ConsoleSink }

/** Console and log tails, and the vCPU state when the hypervisor can say (before it is killed). */
async function bootFailureDetail (launch: HypervisorLaunch, sinks: Sinks): Promise<string> {
  const vcpus = launch.diagnose === undefined ? '' : `; vcpus: ${await launch.diagnose().catch((e: Error) => e.message)}`
  return `console: ${sinks.console.tail()}; log: ${sinks.log.tail()}${vcpus}`
}

async function listen (path: string): Promise<Server> {
  await rm(path, { force: true })
  const server = createServer()
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(path, () => { server.off('error', reject); resolve() })
  })
  return server
}

export interface VmSandboxInit {
  tier: Tier
  spec: SandboxSpec
  /** What the VM boots. */
  kernel: GuestKernel
  launch: HypervisorLaunch
  bootTimeoutMs: number
  maxOutputBytes?: number
  /** Extra clean-up on destroy (run directory with the sockets). */
  cleanup: () => Promise<void>
}

/**
 * Start the hypervisor and wait for the agent. Async. Throws
 * UnsupportedError (with the tail of the guest console) when the VM does
 * not come up within `bootTimeoutMs`; nothing is left running then.
 */
export async function launchVm (init: VmSandboxInit): Promise<VmSandbox> {
  const { launch } = init
  const server = await listen(launch.agentSocket)
  const sinks: Sinks = { console: new ConsoleSink(launch.consoleFile), log: new ConsoleSink(launch.logFile) }
  if (launch.consoleSocket !== undefined) await sinks.console.listen(launch.consoleSocket)
  const started = performance.now()
  const child = spawn(launch.argv[0]!, launch.argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] })
  ;(launch.consoleSocket === undefined ? sinks.console : sinks.log).attach(child.stdout!)
  sinks.log.attach(child.stderr!)
  const exited = new Promise<string>(resolve => {
    child.on('error', err => resolve(`cannot start ${launch.argv[0]}: ${err.message}`))
    child.on('close', (code, signal) => resolve(`${launch.name} exited (${signal ?? `code ${code}`})`))
  })
  if (child.pid !== undefined) await writeFile(`${init.spec.stateDir}/${launch.name}.pid`, `${child.pid}\n`)
  const connected = new Promise<Socket>(resolve => server.once('connection', resolve))
  let timer: NodeJS.Timeout | undefined
  let timedOut = false
  const timeout = new Promise<string>(resolve => {
    timer = setTimeout(() => { timedOut = true; resolve(`no answer from the guest agent within ${init.bootTimeoutMs} ms`) }, init.bootTimeoutMs)
  })
  const failure = async (why: string): Promise<Error> => {
    const message = `${init.tier} sandbox ${init.spec.id} did not boot: ${why}; ${await bootFailureDetail(launch, sinks)}`
    return timedOut ? new VmBootTimeoutError(message) : new UnsupportedError(message)
  }
  try {
    const first = await Promise.race([connected, exited, timeout])
    if (typeof first === 'string') throw await failure(first)
    server.close() // one connection per VM; the listening socket is no longer needed
    const channel = new AgentChannel(first, { maxOutputBytes: init.maxOutputBytes })
    const ready = await Promise.race([channel.ready, exited, timeout])
    if (typeof ready === 'string') throw await failure(ready)
    const timings: VmTimings = { bootMs: performance.now() - started, guestUptimeMs: Math.round(Number(ready.uptimeS ?? 0) * 1000) }
    return new VmSandbox(init, child, exited, channel, timings, ready, sinks)
  } catch (err) {
    child.kill('SIGKILL')
    server.close()
    await exited
    await sinks.console.close()
    await sinks.log.close()
    throw err instanceof UnsupportedError ? err : new UnsupportedError(`${init.tier} sandbox ${init.spec.id} did not boot: ${(err as Error).message}; ${await bootFailureDetail({ ...launch, diagnose: undefined }, sinks)}`, { cause: err })
  } finally {
    clearTimeout(timer)
  }
}

export class VmSandbox implements Sandbox {
  readonly id: string
  readonly tier: Tier
  readonly timings: VmTimings
  /** The kernel and initrd it booted. */
  readonly kernel: GuestKernel
  /** What the agent reported at READY (kernel release, free bytes of the root). */
  readonly guest: Record<string, string>
  #state: 'running' | 'stopped' | 'destroyed' = 'running'
  #stopping: Promise<void> | undefined
  #destroying: Promise<void> | undefined

  constructor (
    private readonly init: VmSandboxInit,
    private readonly child: ChildProcess,
    private readonly exited: Promise<string>,
    private readonly channel: AgentChannel,
    timings: VmTimings,
    guest: Record<string, string>,
    private readonly sinks: Sinks
  ) {
    this.id = init.spec.id
    this.tier = init.tier
    this.timings = timings
    this.kernel = init.kernel
    this.guest = guest
    let exitedWhy = ''
    void exited.then(why => { exitedWhy = `${why}; ` })
    channel.describeLoss = () => `${exitedWhy}the VM's console ends with: ${sinks.console.tail()}`
  }

  /**
   * See {@link Sandbox.exec}. Argv, env and cwd come from the image config
   * and `opts` as in every tier; the user is resolved inside the guest.
   * Throws UsageError after stop/destroy, for nothing to run, a relative
   * cwd or an unknown user; VmGoneError when the VM died.
   */
  async exec (opts: ExecOptions): Promise<ExecResult> {
    if (this.#state !== 'running') throw new UsageError(`sandbox ${this.id} is ${this.#state}`)
    const c = this.init.spec.config.config ?? {}
    const argv = opts.cmd.length > 0 ? [...opts.cmd] : [...(c.Entrypoint ?? []), ...(c.Cmd ?? [])]
    if (argv.length === 0) throw new UsageError('nothing to run: no command given and the image has no Entrypoint or Cmd')
    const cwd = opts.cwd ?? (c.WorkingDir !== undefined && c.WorkingDir !== '' ? c.WorkingDir : '/')
    if (!cwd.startsWith('/')) throw new UsageError(`working directory ${JSON.stringify(cwd)} is not absolute`)
    const env = mergeEnv([`PATH=${DEFAULT_PATH}`], c.Env, opts.env)
    const user = (opts.user ?? c.User ?? '').trim()
    const run = this.channel.exec({ argv, env, cwd, user }, opts)
    if (opts.timeoutMs === undefined) return await run
    // A guest too wedged to report the killed command: give up on the VM.
    let grace: NodeJS.Timeout | undefined
    const wedged = new Promise<never>((resolve, reject) => {
      grace = setTimeout(() => {
        this.channel.abandon(new VmGoneError(`sandbox ${this.id}: the guest did not end a timed-out command; VM killed`))
        this.child.kill('SIGKILL')
        reject(new VmGoneError('unreachable'))
      }, opts.timeoutMs! + KILL_GRACE_MS)
    })
    wedged.catch(() => {})
    try {
      return await Promise.race([run, wedged])
    } finally {
      clearTimeout(grace)
    }
  }

  /** See {@link Sandbox.stop}: the guest powers off; its disk (the overlay) stays. */
  async stop (): Promise<void> {
    if (this.#state === 'running') this.#state = 'stopped'
    this.#stopping ??= (async () => {
      this.channel.shutdown()
      this.channel.abandon(new UsageError(`sandbox ${this.id} is stopped`))
      let timer: NodeJS.Timeout | undefined
      const grace = new Promise<void>(resolve => { timer = setTimeout(resolve, SHUTDOWN_GRACE_MS) })
      await Promise.race([this.exited, grace])
      clearTimeout(timer)
      this.child.kill('SIGKILL')
      await this.exited
      await this.sinks.console.close()
      await this.sinks.log.close()
      await rm(`${this.init.spec.stateDir}/${this.init.launch.name}.pid`, { force: true })
    })()
    await this.#stopping
  }

  /** See {@link Sandbox.destroy}. */
  async destroy (): Promise<void> {
    this.#destroying ??= (async () => {
      this.#state = 'destroyed'
      await this.stop()
      await this.init.cleanup()
      await rm(this.init.spec.stateDir, { recursive: true, force: true })
    })().catch(err => { this.#destroying = undefined; throw err })
    await this.#destroying
  }
}
