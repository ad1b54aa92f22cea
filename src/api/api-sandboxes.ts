/**
 * The node's sandboxes created through the API: each a library sandbox
 * (src/sandbox/create-sandbox.ts: recorded in the node database with this
 * process as its owner, so a crash of this process leaves orphans that
 * layerd's next start removes), with its access token, timeout, metadata,
 * files (./sandbox-files.ts) and commands (./sandbox-processes.ts).
 *
 * A sandbox is killed at its timeout (E2B's default 300 s; set again by
 * connect and set-timeout). At most `maxSandboxes` live at once, creations
 * in flight included; one more is refused with LimitExceededError (429).
 *
 * Snapshots run `layerctl commit`: the sandbox's writable layer becomes a
 * layer on its image, pushed as `snapshot/<sandbox id>:<n>`, from which
 * new sandboxes start (fork is snapshot + create).
 *
 * May import: src/errors.ts, src/runtime/, src/sandbox/, ./ modules, node built-ins.
 */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { BadInputError, CommandFailedError, LimitExceededError, NotFoundError } from '../errors.js'
import { overlayPaths } from '../runtime/overlay/sandbox-overlay.js'
import { parseTier, type Tier } from '../runtime/sandbox.js'
import { createSandbox, type ManagedSandbox } from '../sandbox/create-sandbox.js'
import { newAccessToken } from './api-auth.js'
import { SandboxFiles } from './sandbox-files.js'
import { SandboxProcesses } from './sandbox-processes.js'

export const DEFAULT_TIMEOUT_S = 300
/** E2B's own ceiling for a sandbox's life. */
export const MAX_TIMEOUT_S = 24 * 3600
export const DEFAULT_MAX_SANDBOXES = 256
const LAYERCTL_ENTRY = fileURLToPath(new URL('../../cli/layerctl.js', import.meta.url))

export interface LiveSandbox {
  readonly id: string
  readonly template: string
  readonly tier: Tier
  readonly metadata: Record<string, string>
  readonly envs: Record<string, string>
  readonly token: string
  readonly startedAt: Date
  endAt: Date
  readonly sandbox: ManagedSandbox
  /** Undefined for the VM tiers, whose files live in the guest. */
  readonly files?: SandboxFiles
  readonly processes: SandboxProcesses
  snapshots: number
}

export interface CreateRequest { template: string, tier: Tier, timeoutS: number, metadata: Record<string, string>, envs: Record<string, string> }

export class ApiSandboxes {
  readonly #live = new Map<string, LiveSandbox>()
  readonly #timers = new Map<string, NodeJS.Timeout>()
  #creating = 0
  #closing = false

  constructor (private readonly opts: { home: string, maxSandboxes: number, log: (line: string) => void }) {}

  get size (): number { return this.#live.size }

  /** Check a timeout in seconds from a request. Sync; throws BadInputError. */
  static timeoutS (v: unknown): number {
    if (v === undefined || v === null) return DEFAULT_TIMEOUT_S
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_TIMEOUT_S) throw new BadInputError(`timeout must be a whole number of seconds from 0 to ${MAX_TIMEOUT_S}`)
    return v
  }

  /** The tier of a create request's metadata (`metadata.tier`), default process. Sync; throws UsageError. */
  static tierOf (metadata: Record<string, string>): Tier {
    return parseTier(metadata.tier ?? 'process')
  }

  /** Async. Throws LimitExceededError over the node's limit, NotFoundError for an unknown image, UsageError for a bad one. */
  async create (req: CreateRequest): Promise<LiveSandbox> {
    if (this.#closing) throw new LimitExceededError('the API server is stopping')
    if (this.#live.size + this.#creating >= this.opts.maxSandboxes) {
      throw new LimitExceededError(`this node holds its limit of ${this.opts.maxSandboxes} API sandboxes; kill one or retry later`)
    }
    this.#creating++
    let sandbox: ManagedSandbox
    try {
      sandbox = await createSandbox({ image: req.template, tier: req.tier, home: this.opts.home, startDaemon: false })
    } finally { this.#creating-- }
    let files: SandboxFiles | undefined
    try {
      if (req.tier === 'process' || req.tier === 'container') files = new SandboxFiles(overlayPaths(sandbox.stateDir).merged, typeof sandbox.config.config?.WorkingDir === 'string' && sandbox.config.config.WorkingDir !== '' ? sandbox.config.config.WorkingDir : '/')
    } catch (err) {
      await sandbox.destroy().catch(() => {})
      throw err
    }
    const now = new Date()
    const envs = Object.entries(req.envs).map(([k, v]) => `${k}=${v}`)
    const live: LiveSandbox = {
      id: sandbox.id,
      template: req.template,
      tier: req.tier,
      metadata: req.metadata,
      envs: req.envs,
      token: newAccessToken(),
      startedAt: now,
      endAt: now,
      sandbox,
      ...(files === undefined ? {} : { files }),
      // The create request's envVars apply to every command; a command's own envs win.
      processes: new SandboxProcesses(async o => await sandbox.exec({ ...o, env: [...envs, ...(o.env ?? [])] })),
      snapshots: 0
    }
    this.#live.set(live.id, live)
    this.setTimeout(live.id, req.timeoutS)
    return live
  }

  /** Sync. Throws NotFoundError. */
  get (id: string): LiveSandbox {
    const live = this.#live.get(id)
    if (live === undefined) throw new NotFoundError(`sandbox ${id} not found`)
    return live
  }

  list (): LiveSandbox[] { return [...this.#live.values()] }

  /** Kill the sandbox `seconds` from now. Sync; throws NotFoundError. */
  setTimeout (id: string, seconds: number): void {
    const live = this.get(id)
    clearTimeout(this.#timers.get(id))
    live.endAt = new Date(Date.now() + seconds * 1000)
    this.#timers.set(id, setTimeout(() => {
      this.opts.log(`sandbox ${id}: timed out, killing it`)
      this.kill(id).catch(err => { this.opts.log(`sandbox ${id}: kill at timeout failed: ${(err as Error).message}`) })
    }, seconds * 1000))
  }

  /** Kill every command, destroy the sandbox. Async; throws NotFoundError for an unknown one. */
  async kill (id: string): Promise<void> {
    const live = this.get(id)
    this.#live.delete(id)
    clearTimeout(this.#timers.get(id))
    this.#timers.delete(id)
    await live.processes.killAll()
    live.files?.close()
    await live.sandbox.destroy()
  }

  /** Commit the sandbox's writable layer as a new image; its ref. Async. */
  async snapshot (id: string): Promise<string> {
    const live = this.get(id)
    if (live.tier !== 'process' && live.tier !== 'container') throw new BadInputError(`sandbox ${id} is a ${live.tier} sandbox: snapshots read the writable layer of process and container sandboxes`)
    const ref = `snapshot/${id}:s${++live.snapshots}`
    const out = await runLayerctl(['commit', id, ref], this.opts.home)
    if (out.code !== 0) throw new CommandFailedError(`layerctl commit ${id} ${ref} failed: ${out.stderr.trim()}`)
    return ref
  }

  /** Stop accepting, kill every sandbox. Async. */
  async closeAll (): Promise<void> {
    this.#closing = true
    await Promise.all([...this.#live.keys()].map(async id => { await this.kill(id).catch(() => {}) }))
  }
}

async function runLayerctl (args: string[], home: string): Promise<{ code: number, stderr: string }> {
  return await new Promise(resolve => {
    const child = spawn(process.execPath, [LAYERCTL_ENTRY, ...args], { env: { ...process.env, LAYERD_HOME: home }, stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (c: Buffer) => { if (stderr.length < 64 * 1024) stderr += c.toString() })
    child.on('error', err => resolve({ code: 127, stderr: err.message }))
    child.on('close', code => resolve({ code: code ?? 1, stderr }))
  })
}
