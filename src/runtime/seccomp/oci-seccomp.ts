/**
 * The deny policy (`deny-policy.ts`) as an OCI runtime-spec `linux.seccomp`
 * object, for runc and crun (which compile it with libseccomp). Same
 * decisions as the process tier's BPF program: default allow; the denied
 * syscalls, namespace flags on unshare/clone and the denied ioctls fail with
 * EPERM; clone3 fails with ENOSYS. Only x86_64 is listed, so libseccomp
 * refuses x32 and i386 calls.
 *
 * Argument checks use SCMP_CMP_MASKED_EQ with `value` as the mask and
 * `valueTwo` as the datum (libseccomp's argument order); ioctl masks never
 * include the upper 32 bits.
 *
 * Pure: no fs, network or native code.
 */
import {
  CLONE_NAMESPACE_FLAGS, DENIED_IOCTLS, DENIED_SYSCALLS, ENOSYS, EPERM, NAMESPACE_FLAG_SYSCALLS
} from './deny-policy.js'

export interface OciSeccompArg { index: number, value: number, valueTwo?: number, op: string }
export interface OciSeccompRule { names: string[], action: string, errnoRet?: number, args?: OciSeccompArg[] }
export interface OciSeccomp { defaultAction: string, architectures: string[], syscalls: OciSeccompRule[], listenerPath?: string }

/**
 * The profile, built fresh on each call (callers may mutate it). With
 * `listenerPath`, denied calls are SCMP_ACT_NOTIFY and runc sends the
 * listener fd to that unix socket (a supervisor answers EPERM and records
 * each: `denial-supervisor.ts`); clone3's ENOSYS stays a plain errno (it is
 * libc's fallback signal, not an attempt). Sync.
 */
export function ociSeccompProfile (listenerPath?: string): OciSeccomp {
  const deny = (): Pick<OciSeccompRule, 'action' | 'errnoRet'> => listenerPath === undefined ? { action: 'SCMP_ACT_ERRNO', errnoRet: EPERM } : { action: 'SCMP_ACT_NOTIFY' }
  const syscalls: OciSeccompRule[] = [
    { names: Object.keys(DENIED_SYSCALLS), ...deny() },
    { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS }
  ]
  // Rules for one syscall are ORed: each namespace bit gets its own rule
  // (MASKED_EQ with the bit as mask and datum: "this bit is set").
  for (const name of Object.keys(NAMESPACE_FLAG_SYSCALLS)) {
    for (let bit = 1; bit <= 0x80000000 && bit > 0; bit *= 2) {
      if ((CLONE_NAMESPACE_FLAGS & bit) === 0) continue
      syscalls.push({ names: [name], ...deny(), args: [{ index: 0, value: bit, valueTwo: bit, op: 'SCMP_CMP_MASKED_EQ' }] })
    }
  }
  for (const d of DENIED_IOCTLS) {
    syscalls.push({ names: ['ioctl'], ...deny(), args: [{ index: 1, value: d.mask, valueTwo: d.value, op: 'SCMP_CMP_MASKED_EQ' }] })
  }
  return { defaultAction: 'SCMP_ACT_ALLOW', architectures: ['SCMP_ARCH_X86_64'], syscalls, ...(listenerPath === undefined ? {} : { listenerPath }) }
}
