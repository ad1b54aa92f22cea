/**
 * TierDriver 'process': the function-call tier. A sandbox is an overlay
 * (image lower, quota'd upper: `../overlay/sandbox-overlay.ts`) plus a
 * cgroup (pids, memory); each `exec` is one bubblewrap invocation over the
 * same overlay (`bwrap-args.ts`). Files persist between execs in the upper;
 * processes do not: when a command exits, its pid namespace goes with it.
 * There is no persistent init to keep alive, leak or attack between calls.
 *
 * May import: src/errors.ts, src/format/, ../sandbox.ts, ../overlay/,
 * ../seccomp/, the modules next to it.
 */
import { closeSync } from 'node:fs'
import { chmod } from 'node:fs/promises'
import type { QuotaKind, SandboxOverlay } from '../overlay/sandbox-overlay.js'
import { LinuxSandbox, linuxTierOptions, setUpLinuxSandbox } from '../overlay/sandbox-setup.js'
import { compileSeccompFilter } from '../seccomp/bpf-filter.js'
import { superviseDenials } from '../seccomp/denial-supervisor.js'
import { landlockWritableDirs, wallExecutableFd, wallPrefix } from '../seccomp/wall-command.js'
import { DEFAULT_WALLS, type Walls } from '../seccomp/walls.js'
import { nativeFdPassing } from '../../native.js'
import type { ExecOptions, ExecResult, Sandbox, SandboxSpec, TierDriver } from '../sandbox.js'
import { SECCOMP_FD, bwrapInvocation } from './bwrap-args.js'
import { resolveExecContext } from './exec-context.js'
import { runToCompletion } from './exec-runner.js'
import { hostToolsUnavailableReason } from './host-checks.js'
import { SandboxCgroup, cgroupUnavailableReason, joinCgroupArgv } from './sandbox-cgroup.js'

export interface ProcessDriverOptions {
  /** How the disk quota is enforced; default 'loop-ext4'. */
  quota?: QuotaKind
  /** cgroup directory (under each v1 controller) holding the sandboxes' groups; default 'layerd'. */
  cgroupParent?: string
  /** Cap on collected stdout and stderr, each; default 16 MiB. */
  maxOutputBytes?: number
  /** Size of the sandbox's /dev/shm tmpfs; default 64 MiB. */
  devShmBytes?: number
  /** Hostname inside; default 'sandbox'. */
  hostname?: string
  /** Seccomp mode and Landlock (`../seccomp/walls.ts`); default: denials recorded, Landlock on. */
  walls?: Partial<Walls>
}

const RUNTIME_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export class ProcessTierDriver implements TierDriver {
  readonly tier = 'process' as const
  readonly #opts: Required<Omit<ProcessDriverOptions, 'walls'>>
  readonly #walls: Walls
  readonly #seccomp: Buffer

  constructor (opts: ProcessDriverOptions = {}) {
    this.#opts = linuxTierOptions(opts)
    this.#walls = { ...DEFAULT_WALLS, ...opts.walls }
    this.#seccomp = compileSeccompFilter(this.#walls.seccomp === 'record' ? 'notify' : 'errno')
  }

  get walls (): Readonly<Walls> { return this.#walls }

  /** See {@link TierDriver.unavailableReason}. */
  async unavailableReason (): Promise<string | undefined> {
    const tools = ['bwrap', 'setpriv', ...(this.#opts.quota === 'loop-ext4' ? ['mkfs.ext4', 'losetup'] : [])]
    return await hostToolsUnavailableReason(tools) ?? await cgroupUnavailableReason()
  }

  /**
   * Mount the overlay, create the cgroup, make the image's WorkingDir.
   * Async. Throws UsageError for a spec without `rootfs` or a bad id or
   * quota, UnsupportedError when a host step fails (after undoing the
   * others).
   */
  async create (spec: SandboxSpec): Promise<Sandbox> {
    // Users other than root run bwrap as themselves: they must be able to reach the merged root.
    const { overlay, cgroup } = await setUpLinuxSandbox('process', spec, this.#opts, async () => { await chmod(spec.stateDir, 0o711) })
    return new ProcessSandbox(spec, overlay, cgroup, this.#opts, this.#walls, this.#seccomp)
  }
}

class ProcessSandbox extends LinuxSandbox {
  readonly tier = 'process' as const

  constructor (
    spec: SandboxSpec, overlay: SandboxOverlay, cgroup: SandboxCgroup,
    private readonly opts: Required<Omit<ProcessDriverOptions, 'walls'>>, private readonly walls: Walls, private readonly seccomp: Buffer
  ) {
    super(spec, overlay, cgroup)
  }

  /** See {@link Sandbox.exec}. Throws UsageError after stop/destroy or for a bad user/cwd. */
  async exec (opts: ExecOptions): Promise<ExecResult> {
    this.assertRunning()
    const ctx = await resolveExecContext(this.spec.rootfs!, this.spec.config, opts)
    const { seccomp, landlock } = this.walls
    const wall = seccomp === 'record' || landlock
    // Inside, fds 3 and 4 are SECCOMP_FD and ARGS_FD; with layerd-wall, 5 is the notification socket and 6 its own file.
    const pair = seccomp === 'record' ? nativeFdPassing().fdSocketPair() : undefined
    const prefix = wall
      ? wallPrefix({
        exeFd: pair === undefined ? 5 : 6,
        ...(pair === undefined ? {} : { seccomp: { programFd: SECCOMP_FD, notifyFd: 5 } }),
        ...(landlock ? { landlockDirs: await landlockWritableDirs(this.overlay.merged) } : {})
      })
      : []
    const bwrap = bwrapInvocation(ctx, {
      merged: this.overlay.merged, hostname: this.opts.hostname, devShmBytes: this.opts.devShmBytes,
      bwrapSeccomp: seccomp === 'errno', commandPrefix: prefix
    })
    const argv = joinCgroupArgv(this.cgroup.procsFiles, bwrap.argv)
    const supervisor = pair === undefined ? undefined : this.#supervise(pair[0])
    let pid: number | undefined
    try {
      return await runToCompletion({
        argv,
        env: { PATH: RUNTIME_PATH },
        extraFds: [seccomp === 'off' ? Buffer.alloc(0) : this.seccomp, bwrap.argsFd],
        ...(wall ? { inheritFds: [...(pair === undefined ? [] : [pair[1]]), wallExecutableFd()] } : {}),
        maxOutputBytes: this.opts.maxOutputBytes,
        onSpawn: p => { pid = p; if (pair !== undefined) closeQuietly(pair[1]) },
        // bwrap's monitor dies; --die-with-parent takes the pid namespace's init, and so every process in it, along.
        kill: async () => { if (pid !== undefined) { try { process.kill(pid, 'SIGKILL') } catch {} } }
      }, opts)
    } finally {
      if (pair !== undefined && pid === undefined) closeQuietly(pair[1])
      // Every process of the command is gone: what the supervisor received reaches the sink before exec returns.
      await supervisor?.stop()
    }
  }

  /** The supervisor for one command's filter, its events going to the spec's sink (or nowhere). */
  #supervise (fd: number): { stop: () => Promise<unknown> } {
    const sink = this.spec.denials ?? { record: () => {}, dropped: () => {} }
    return superviseDenials({ kind: 'socket', fd }, { sandbox: this.id, image: this.spec.imageName, tier: 'process' }, sink)
  }
}

function closeQuietly (fd: number): void {
  try { closeSync(fd) } catch {}
}
