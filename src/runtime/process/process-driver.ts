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
import { chmod } from 'node:fs/promises'
import type { QuotaKind, SandboxOverlay } from '../overlay/sandbox-overlay.js'
import { LinuxSandbox, linuxTierOptions, setUpLinuxSandbox } from '../overlay/sandbox-setup.js'
import { compileSeccompFilter } from '../seccomp/bpf-filter.js'
import type { ExecOptions, ExecResult, Sandbox, SandboxSpec, TierDriver } from '../sandbox.js'
import { bwrapInvocation } from './bwrap-args.js'
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
}

const RUNTIME_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export class ProcessTierDriver implements TierDriver {
  readonly tier = 'process' as const
  readonly #opts: Required<ProcessDriverOptions>
  readonly #seccomp = compileSeccompFilter()

  constructor (opts: ProcessDriverOptions = {}) {
    this.#opts = linuxTierOptions(opts)
  }

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
    return new ProcessSandbox(spec, overlay, cgroup, this.#opts, this.#seccomp)
  }
}

class ProcessSandbox extends LinuxSandbox {
  readonly tier = 'process' as const

  constructor (spec: SandboxSpec, overlay: SandboxOverlay, cgroup: SandboxCgroup, private readonly opts: Required<ProcessDriverOptions>, private readonly seccomp: Buffer) {
    super(spec, overlay, cgroup)
  }

  /** See {@link Sandbox.exec}. Throws UsageError after stop/destroy or for a bad user/cwd. */
  async exec (opts: ExecOptions): Promise<ExecResult> {
    this.assertRunning()
    const ctx = await resolveExecContext(this.spec.rootfs!, this.spec.config, opts)
    const bwrap = bwrapInvocation(ctx, { merged: this.overlay.merged, hostname: this.opts.hostname, devShmBytes: this.opts.devShmBytes })
    const argv = joinCgroupArgv(this.cgroup.procsFiles, bwrap.argv)
    let pid: number | undefined
    return await runToCompletion({
      argv,
      env: { PATH: RUNTIME_PATH },
      extraFds: [this.seccomp, bwrap.argsFd], // fds 3 and 4: SECCOMP_FD, ARGS_FD
      maxOutputBytes: this.opts.maxOutputBytes,
      onSpawn: p => { pid = p },
      // bwrap's monitor dies; --die-with-parent takes the pid namespace's init, and so every process in it, along.
      kill: async () => { if (pid !== undefined) { try { process.kill(pid, 'SIGKILL') } catch {} } }
    }, opts)
  }
}

