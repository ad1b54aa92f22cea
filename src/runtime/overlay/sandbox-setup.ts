/**
 * What the process and container tiers both do to create a sandbox: mount
 * its overlay (the image as lower, a quota'd upper), create its cgroup with
 * the pids and memory limits, and make the image's WorkingDir. Undoes what
 * it did when a step fails.
 *
 * May import: src/errors.ts, ../process/, this folder.
 */
import { UsageError } from '../../errors.js'
import { checkSandboxId } from '../process/host-checks.js'
import { mkdirInRoot } from '../process/rooted-path.js'
import { SandboxCgroup } from '../process/sandbox-cgroup.js'
import type { SandboxSpec, Tier } from '../sandbox.js'
import { mountSandboxOverlay, removeSandboxOverlay, type QuotaKind, type SandboxOverlay } from './sandbox-overlay.js'

export interface LinuxSandboxParts { overlay: SandboxOverlay, cgroup: SandboxCgroup }

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
