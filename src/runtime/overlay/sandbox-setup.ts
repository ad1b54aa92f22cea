/**
 * What the process and container tiers both do to create a sandbox: mount
 * its overlay (the image as lower, a quota'd upper), create its cgroup with
 * the pids and memory limits, and make the image's WorkingDir. Undoes what
 * it did when a step fails. And what their sandboxes share once made
 * (LinuxSandbox): the state, stop (kill the cgroup) and destroy (remove the
 * cgroup, then the overlay, retried after a failure).
 *
 * May import: src/errors.ts, ../process/, this folder.
 */
import { UsageError } from '../../errors.js'
import { DEFAULT_DEV_SHM_BYTES } from '../process/bwrap-args.js'
import { checkSandboxId } from '../process/host-checks.js'
import { mkdirInRoot } from '../process/rooted-path.js'
import { SandboxCgroup } from '../process/sandbox-cgroup.js'
import type { ExecOptions, ExecResult, Sandbox, SandboxSpec, Tier } from '../sandbox.js'
import { mountSandboxOverlay, removeSandboxOverlay, type QuotaKind, type SandboxOverlay } from './sandbox-overlay.js'

export interface LinuxSandboxParts { overlay: SandboxOverlay, cgroup: SandboxCgroup }

/** The options both Linux tiers' drivers take, and their defaults (linuxTierOptions). */
export interface LinuxTierOptions {
  quota: QuotaKind
  cgroupParent: string
  maxOutputBytes: number
  devShmBytes: number
  hostname: string
}

/** `opts` with each option left out set to its default: loop-ext4 quota, cgroup parent 'layerd', 16 MiB of output each, 64 MiB of /dev/shm, hostname 'sandbox'. */
export function linuxTierOptions (opts: Partial<LinuxTierOptions>): LinuxTierOptions {
  return {
    quota: opts.quota ?? 'loop-ext4',
    cgroupParent: opts.cgroupParent ?? 'layerd',
    maxOutputBytes: opts.maxOutputBytes ?? 16 * 1024 ** 2,
    devShmBytes: opts.devShmBytes ?? DEFAULT_DEV_SHM_BYTES,
    hostname: opts.hostname ?? 'sandbox'
  }
}

/**
 * Async. Throws UsageError for a spec without `rootfs` or a bad id,
 * UnsupportedError when a host step fails. `more` runs last, inside the undo scope.
 */
export async function setUpLinuxSandbox (tier: Tier, spec: SandboxSpec, opts: { quota: QuotaKind, cgroupParent: string }, more?: (overlay: SandboxOverlay) => Promise<void>): Promise<LinuxSandboxParts> {
  checkSandboxId(spec.id)
  if (spec.rootfs === undefined) throw new UsageError(`sandbox ${spec.id}: the ${tier} tier needs the image's rootfs`)
  const overlay = await mountSandboxOverlay({ lower: spec.rootfs, stateDir: spec.stateDir, diskBytes: spec.limits.diskBytes, quota: opts.quota })
  let cgroup: SandboxCgroup | undefined
  try {
    cgroup = await SandboxCgroup.create(spec.id, { pids: spec.limits.pids, memoryBytes: spec.limits.memoryBytes }, opts.cgroupParent)
    const workdir = spec.config.config?.WorkingDir
    if (workdir !== undefined && workdir.startsWith('/')) await mkdirInRoot(overlay.merged, workdir)
    await more?.(overlay)
  } catch (err) {
    await cgroup?.remove().catch(() => {})
    await removeSandboxOverlay(spec.stateDir).catch(() => {})
    throw err
  }
  return { overlay, cgroup }
}

/**
 * A process- or container-tier sandbox over its overlay and cgroup. The
 * tier adds `exec`, and what its runtime leaves behind to clean up after a
 * stop (`afterStop`) and before the cgroup goes (`beforeRemove`).
 */
export abstract class LinuxSandbox implements Sandbox {
  abstract readonly tier: Tier
  readonly id: string
  /** Where the sandbox's changes live, for commit. */
  readonly upperDir: string
  #state: 'running' | 'stopped' | 'destroyed' = 'running'
  #destroying: Promise<void> | undefined

  constructor (protected readonly spec: SandboxSpec, protected readonly overlay: SandboxOverlay, protected readonly cgroup: SandboxCgroup) {
    this.id = spec.id
    this.upperDir = overlay.upperDir
  }

  abstract exec (opts: ExecOptions): Promise<ExecResult>

  /** Throws UsageError unless the sandbox is running. */
  protected assertRunning (): void {
    if (this.#state !== 'running') throw new UsageError(`sandbox ${this.id} is ${this.#state}`)
  }

  /** After stop() killed the cgroup's processes. */
  protected async afterStop (): Promise<void> {}
  /** In destroy(), before the cgroup is removed. */
  protected async beforeRemove (): Promise<void> {}

  /** See {@link Sandbox.stop}. */
  async stop (): Promise<void> {
    if (this.#state === 'running') this.#state = 'stopped'
    await this.cgroup.killAll()
    await this.afterStop()
  }

  /** See {@link Sandbox.destroy}. */
  async destroy (): Promise<void> {
    this.#destroying ??= (async () => {
      this.#state = 'destroyed'
      await this.beforeRemove()
      await this.cgroup.remove()
      await removeSandboxOverlay(this.spec.stateDir)
    })().catch(err => { this.#destroying = undefined; throw err }) // a failed teardown can be retried
    await this.#destroying
  }
}
