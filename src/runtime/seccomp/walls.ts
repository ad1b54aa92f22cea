/**
 * Which walls the Linux tiers raise around each command, and the probe of
 * what this host allows:
 *
 * - seccomp: 'record' (default) sends denied calls to a supervisor that
 *   answers EPERM and records them (`denial-supervisor.ts`); 'errno' has the
 *   kernel answer EPERM with no record; 'off' installs no filter (a
 *   test-only switch: it shows what the other walls hold alone).
 * - landlock (off by default: opt in): writes only beneath the sandbox's
 *   own top-level directories, tmpfs and device paths, by
 *   `native/layerd_wall.c`. Off by default because its rules cover each
 *   top-level directory of the root but not the root itself, so a write of a
 *   new file at `/` gets EACCES where the quota's ENOSPC is the contract, and
 *   a rule on `/` would cover /proc and /sys too (Landlock has no exceptions
 *   beneath a rule).
 * - BPF LSM: never loaded here; `bpfLsmStatus()` says why.
 *
 * May import: node built-ins.
 */
import { readFileSync } from 'node:fs'

export type SeccompWall = 'record' | 'errno' | 'off'

export interface Walls {
  seccomp: SeccompWall
  landlock: boolean
}

export const DEFAULT_WALLS: Readonly<Walls> = { seccomp: 'record', landlock: false }

/** The kernel's active LSMs (securityfs), or [] when unreadable. Sync. */
export function activeLsms (): string[] {
  try { return readFileSync('/sys/kernel/security/lsm', 'utf8').trim().split(',').filter(s => s !== '') } catch { return [] }
}

/**
 * Why BPF LSM programs are not used. This kernel lists `bpf` among its LSMs
 * but refuses BPF_PROG_LOAD of lsm/ programs with EPERM (lockdown in
 * integrity mode), even as root with CAP_BPF and CAP_MAC_ADMIN; layerd
 * carries no BPF LSM program, so it never tries on any host.
 */
export function bpfLsmStatus (): string {
  const lsms = activeLsms()
  if (!lsms.includes('bpf')) return 'unavailable: bpf is not among the kernel\'s active LSMs'
  let lockdown = ''
  try { lockdown = /\[(\w+)\]/.exec(readFileSync('/sys/kernel/security/lockdown', 'utf8'))?.[1] ?? '' } catch {}
  return `not used: layerd ships no BPF LSM program (this host lists bpf among its LSMs${lockdown === '' ? '' : `, lockdown ${lockdown}`}, and refuses lsm/ programs with EPERM when tried as root)`
}

/** Whether Landlock is among the active LSMs. Sync. */
export function landlockActive (): boolean {
  return activeLsms().includes('landlock')
}
