/**
 * TierDriver 'container': each exec is one OCI container (`runc run`, or
 * crun) whose bundle root is the sandbox's overlay merged dir
 * (`../overlay/sandbox-overlay.ts`) and whose config.json is generated from
 * the image config (`oci-config.ts`). Like the process tier, files persist
 * between execs in the upper and processes do not (no long-lived init).
 *
 * The sandbox's cgroup (`/layerd/<id>` in pids and memory, with the
 * sandbox's limits) is the parent of every exec's runtime-made group
 * (`/layerd/<id>/e<n>`), so the limits hold across concurrent execs and
 * teardown finds everything under one path.
 *
 * May import: src/errors.ts, src/format/, ../sandbox.ts, ../overlay/,
 * ../seccomp/, ../process/, the modules next to it.
 */
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { QuotaKind, SandboxOverlay } from '../overlay/sandbox-overlay.js'
import { LinuxSandbox, linuxTierOptions, setUpLinuxSandbox } from '../overlay/sandbox-setup.js'
import { resolveExecContext } from '../process/exec-context.js'
import { runToCompletion } from '../process/exec-runner.js'
import { runHost } from '../../host/host-command.js'
import { hostToolsUnavailableReason } from '../process/host-checks.js'
import { SandboxCgroup, cgroupUnavailableReason } from '../process/sandbox-cgroup.js'
import type { ExecOptions, ExecResult, Sandbox, SandboxSpec, TierDriver } from '../sandbox.js'
import { superviseDenials } from '../seccomp/denial-supervisor.js'
import { landlockWritableDirs, wallExecutableFd, wallPrefix } from '../seccomp/wall-command.js'
import { DEFAULT_WALLS, type Walls } from '../seccomp/walls.js'
import { nativeSeccompSupervisor } from '../../native.js'
import { ociRuntimeConfig, readNofileHardLimit } from './oci-config.js'
import { OciRuntime, type OciRuntimeName } from './oci-runtime.js'

export interface ContainerDriverOptions {
  /** Default 'runc'. */
  runtime?: OciRuntimeName
  /** The runtime's `--root` state directory; default /run/layerd/<runtime>. */
  runtimeStateRoot?: string
  /** How the disk quota is enforced; default 'loop-ext4'. */
  quota?: QuotaKind
  /** cgroup directory holding the sandboxes' groups; default 'layerd'. */
  cgroupParent?: string
  /** Cap on collected stdout and stderr, each; default 16 MiB. */
  maxOutputBytes?: number
  devShmBytes?: number
  hostname?: string
  /** Seccomp mode and Landlock (`../seccomp/walls.ts`); default: denials recorded, Landlock on. */
  walls?: Partial<Walls>
}

const NOFILE_HARD_LIMIT = readNofileHardLimit()
const RUNTIME_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export class ContainerTierDriver implements TierDriver {
  readonly tier = 'container' as const
  readonly #runtime: OciRuntime
  readonly #opts: Required<Omit<ContainerDriverOptions, 'runtime' | 'runtimeStateRoot' | 'walls'>>
  readonly #walls: Walls

  constructor (opts: ContainerDriverOptions = {}) {
    this.#runtime = new OciRuntime(opts.runtime ?? 'runc', opts.runtimeStateRoot)
    this.#opts = linuxTierOptions(opts)
    this.#walls = { ...DEFAULT_WALLS, ...opts.walls }
  }

  get walls (): Readonly<Walls> { return this.#walls }

  get runtime (): OciRuntimeName { return this.#runtime.name }

  /** See {@link TierDriver.unavailableReason}. */
  async unavailableReason (): Promise<string | undefined> {
    const tools = [...this.#runtime.programs, ...(this.#opts.quota === 'loop-ext4' ? ['mkfs.ext4', 'losetup'] : [])]
    return await hostToolsUnavailableReason(tools) ?? await cgroupUnavailableReason()
  }

  /** Mount the overlay, create the cgroup, make the WorkingDir. Async; errors as the process tier's create(). */
  async create (spec: SandboxSpec): Promise<Sandbox> {
    const { overlay, cgroup } = await setUpLinuxSandbox('container', spec, this.#opts, async () => {
      await mkdir(join(spec.stateDir, 'bundles'), { recursive: true })
      await mkdir(this.#runtime.stateRoot, { recursive: true, mode: 0o700 })
      if (this.#walls.seccomp === 'record') await mkdir(listenerDir(this.#runtime), { recursive: true, mode: 0o700 })
    })
    return new ContainerSandbox(spec, overlay, cgroup, this.#runtime, this.#opts, this.#walls)
  }
}

class ContainerSandbox extends LinuxSandbox {
  readonly tier = 'container' as const
  #execs = 0

  constructor (
    spec: SandboxSpec,
    overlay: SandboxOverlay,
    cgroup: SandboxCgroup,
    private readonly runtime: OciRuntime,
    private readonly opts: Required<Omit<ContainerDriverOptions, 'runtime' | 'runtimeStateRoot' | 'walls'>>,
    private readonly walls: Walls
  ) {
    super(spec, overlay, cgroup)
  }

  /** See {@link Sandbox.exec}. Throws UsageError after stop/destroy or for a bad user/cwd. */
  async exec (opts: ExecOptions): Promise<ExecResult> {
    this.assertRunning()
    const ctx = await resolveExecContext(this.spec.rootfs!, this.spec.config, opts)
    const n = ++this.#execs
    const containerId = `${this.id}-e${n}`
    const bundle = join(this.spec.stateDir, 'bundles', `e${n}`)
    await mkdir(bundle, { recursive: true })
    const { seccomp, landlock } = this.walls
    // runc's socket path: short (sun_path holds 108 bytes), one per container.
    const listenerPath = seccomp === 'record' ? join(listenerDir(this.runtime), `${containerId}.sock`) : undefined
    const landlockDirs = landlock ? await landlockWritableDirs(this.overlay.merged) : undefined
    const config = ociRuntimeConfig({
      ctx,
      rootPath: this.overlay.merged,
      hostname: this.opts.hostname,
      pids: this.spec.limits.pids,
      memoryBytes: this.spec.limits.memoryBytes,
      cgroupsPath: `${this.cgroup.path}/e${n}`,
      devShmBytes: this.opts.devShmBytes,
      nofileHardLimit: NOFILE_HARD_LIMIT,
      seccomp: seccomp !== 'off',
      ...(listenerPath === undefined ? {} : { seccompListenerPath: listenerPath }),
      // runc preserves the caller's fd 3 (layerd-wall's file) as fd 3 inside.
      ...(landlockDirs === undefined ? {} : { commandPrefix: wallPrefix({ exeFd: 3, landlockDirs }) })
    })
    let supervisor: { stop: () => Promise<unknown> } | undefined
    try {
      await writeFile(join(bundle, 'config.json'), JSON.stringify(config))
      if (listenerPath !== undefined) supervisor = this.#supervise(listenerPath)
      const result = await runToCompletion({
        argv: this.runtime.runArgv(bundle, containerId, landlock ? 1 : 0),
        env: { PATH: RUNTIME_PATH },
        ...(landlock ? { inheritFds: [wallExecutableFd()] } : {}),
        maxOutputBytes: this.opts.maxOutputBytes,
        // Killing the container's init ends its pid namespace; `runc run` then reaps and returns.
        kill: async () => { await this.#runtimeCommand(this.runtime.killArgv(containerId)) }
      }, opts)
      if (result.timedOut || result.signal !== undefined) await this.#runtimeCommand(this.runtime.deleteArgv(containerId))
      return result
    } finally {
      // The container's processes are gone: what the supervisor received reaches the sink before exec returns.
      await supervisor?.stop()
      if (listenerPath !== undefined) await rm(listenerPath, { force: true })
      await rm(bundle, { recursive: true, force: true })
    }
  }

  /** A listening socket at `path` for runc, and the supervisor that takes the listener from it. */
  #supervise (path: string): { stop: () => Promise<unknown> } {
    const fd = nativeSeccompSupervisor().seccompListenSocket(path)
    const sink = this.spec.denials ?? { record: () => {}, dropped: () => {} }
    return superviseDenials({ kind: 'listen', fd }, { sandbox: this.id, image: this.spec.imageName, tier: 'container' }, sink)
  }

  async #runtimeCommand (argv: string[]): Promise<void> {
    await runHost(argv[0]!, argv.slice(1)).catch(() => {})
  }

  /** After stop: the containers whose `run` the kill ended. */
  protected override async afterStop (): Promise<void> {
    await this.#deleteLeftoverContainers()
  }

  /** Before the cgroup goes: nothing left running, and no container the runtime still lists. */
  protected override async beforeRemove (): Promise<void> {
    await this.cgroup.killAll()
    await this.#deleteLeftoverContainers()
  }

  /** Containers of this sandbox the runtime still lists (its `runc run` was killed, say). */
  async #deleteLeftoverContainers (): Promise<void> {
    const names = await readdir(this.runtime.stateRoot).catch(() => [] as string[])
    for (const name of names.filter(n => n.startsWith(`${this.id}-e`))) await this.#runtimeCommand(this.runtime.deleteArgv(name))
  }
}

/** Where the runtime's seccomp listener sockets are made (beside its state root). */
function listenerDir (runtime: OciRuntime): string {
  return `${runtime.stateRoot}-seccomp`
}
