/**
 * One interface over four isolation tiers. A tier driver only decides how
 * the mounted image is exposed and isolated; the image config (env, workdir,
 * user, entrypoint/cmd) applies the same way everywhere.
 *
 * | tier      | exposure                                         | runtime            |
 * |-----------|--------------------------------------------------|--------------------|
 * | process   | overlayfs (FUSE mount lower, quota'd upper)      | bubblewrap         |
 * | container | OCI bundle over the same overlay                 | runc (or crun)     |
 * | microvm   | block view (raw ext4 on FUSE) + qcow2 overlay    | firecracker / QEMU -M microvm |
 * | vm        | the same block view on a full machine            | QEMU (KVM or TCG)  |
 *
 * May import: src/errors.ts, src/format/, and lower layers; never src/daemon or src/cli.
 */
import type { Writable } from 'node:stream'
import { UsageError } from '../errors.js'
import type { OciImageConfig } from '../format/manifest.js'
import type { DenialSink } from './seccomp/denial-event.js'

export type Tier = 'process' | 'container' | 'microvm' | 'vm'
export const TIERS: readonly Tier[] = ['process', 'container', 'microvm', 'vm']

/** Sync; throws UsageError naming the input and the tiers. */
export function parseTier (s: string): Tier {
  if (!(TIERS as readonly string[]).includes(s)) throw new UsageError(`unknown tier ${JSON.stringify(s)}: use ${TIERS.join(', ')}`)
  return s as Tier
}

export interface SandboxLimits {
  /** Writable space; reaching it gives ENOSPC inside the sandbox. Default 1 GiB. */
  diskBytes: number
  /** Memory cap (cgroup for process/container, guest RAM for VMs). */
  memoryBytes: number
  /** Maximum number of processes/threads (pids cgroup; inside the guest for VMs). */
  pids: number
}

export const DEFAULT_LIMITS: SandboxLimits = {
  diskBytes: 1024 ** 3,
  memoryBytes: 512 * 1024 ** 2,
  pids: 1024
}

/** What a driver needs to create a sandbox. Paths are on the host. */
export interface SandboxSpec {
  id: string
  /** For messages: NAME:TAG or a digest. */
  imageName: string
  config: OciImageConfig
  /** The image's merged root filesystem, read-only (a layerd FUSE mount): process and container tiers. */
  rootfs?: string
  /** The image's block view, a raw ext4 file (on a layerd FUSE mount): VM tiers. */
  blockView?: string
  /** A directory owned by this sandbox for its upper dir, bundle, overlay disk, logs. */
  stateDir: string
  limits: SandboxLimits
  /** Where the Linux tiers' recorded denials go (none recorded without one). */
  denials?: DenialSink
}

export interface ExecOptions {
  /** argv; when empty, the image's entrypoint + cmd. */
  cmd: string[]
  /** Extra KEY=VALUE pairs on top of the image's Env. */
  env?: string[]
  /** Overrides the image's WorkingDir. */
  cwd?: string
  /** Overrides the image's User. */
  user?: string
  /** Kill the command after this long (exit code 124 style: `timedOut` set). */
  timeoutMs?: number
  /** Streams to copy output to as it arrives, besides collecting it. */
  stdout?: Writable
  stderr?: Writable
  stdin?: Uint8Array
  /** Aborting it kills the command as a timeout does (`signal` set, `timedOut` not): the process and container tiers. */
  abort?: AbortSignal
}

export interface ExecResult {
  exitCode: number
  /** Signal that ended the command, when it was killed. */
  signal?: string
  timedOut: boolean
  stdout: Buffer
  stderr: Buffer
  durationMs: number
  /** Set when stdout or stderr passed the driver's output cap and was cut (the `stdout`/`stderr` streams still got everything). */
  outputTruncated?: boolean
}

export interface Sandbox {
  readonly id: string
  readonly tier: Tier
  /** Run a command inside the sandbox. Async; the exit code comes back unchanged. */
  exec: (opts: ExecOptions) => Promise<ExecResult>
  /** Stop everything running inside; the writable state stays (for commit). Idempotent. */
  stop: () => Promise<void>
  /** Stop and remove all state (upper dir, overlay disk, bundle). Idempotent. */
  destroy: () => Promise<void>
}

export interface TierDriver {
  readonly tier: Tier
  /** Undefined when the tier works on this host, else the reason it does not (missing binary, kernel). */
  unavailableReason: () => Promise<string | undefined>
  create: (spec: SandboxSpec) => Promise<Sandbox>
}
