/**
 * The deny policy (`deny-policy.ts`) compiled to a classic-BPF seccomp
 * program, as bubblewrap's `--seccomp FD` reads it: an array of
 * `struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }`, little-endian.
 *
 * Program shape:
 *   arch != AUDIT_ARCH_X86_64      → KILL_PROCESS (i386 and other ABIs are not interpreted)
 *   nr >= __X32_SYSCALL_BIT        → ERRNO(ENOSYS) (x32 shares the x86_64 arch token)
 *   nr in DENIED_SYSCALLS          → ERRNO(EPERM), or USER_NOTIF when recorded
 *                                    (a supervisor outside answers EPERM:
 *                                    `denial-supervisor.ts`)
 *   clone3                         → ERRNO(ENOSYS)
 *   unshare/clone with CLONE_NEW*  → as DENIED_SYSCALLS
 *   ioctl matching DENIED_IOCTLS   → as DENIED_SYSCALLS (low 32 bits of the request)
 *   else                           → ALLOW
 *
 * Also exports a small interpreter (`runBpf`) so tests can check the
 * program's decisions without a kernel.
 *
 * Pure: no fs, network or native code.
 */
import {
  CLONE3_SYSCALL, CLONE_NAMESPACE_FLAGS, DENIED_IOCTLS, DENIED_SYSCALLS, ENOSYS, EPERM, IOCTL_SYSCALL,
  NAMESPACE_FLAG_SYSCALLS
} from './deny-policy.js'

export const AUDIT_ARCH_X86_64 = 0xc000003e
export const X32_SYSCALL_BIT = 0x40000000
export const SECCOMP_RET_KILL_PROCESS = 0x80000000
export const SECCOMP_RET_ERRNO = 0x00050000
export const SECCOMP_RET_ALLOW = 0x7fff0000
export const SECCOMP_RET_USER_NOTIF = 0x7fc00000

/** What a denied call meets: an EPERM from the kernel, or a notification the supervisor answers EPERM (and records). */
export type DeniedAction = 'errno' | 'notify'

// Opcodes (linux/bpf_common.h)
const LD_W_ABS = 0x20
const ALU_AND_K = 0x54
const JEQ_K = 0x15
const JGE_K = 0x35
const JSET_K = 0x45
const RET_K = 0x06

// Offsets in struct seccomp_data
const OFF_NR = 0
const OFF_ARCH = 4
/** Low 32 bits of argument i (little-endian u64 at 16 + 8i). */
const argLow = (i: number): number => 16 + 8 * i

export interface BpfInstruction { code: number, jt: number, jf: number, k: number }

type Target = string | 0
interface PendingInstruction { code: number, k: number, jt: Target, jf: Target }

/** Assembles instructions whose jumps name labels; jumps are forward only (classic BPF). */
class BpfAssembler {
  readonly #code: PendingInstruction[] = []
  readonly #labels = new Map<string, number>()

  op (code: number, k: number): this { this.#code.push({ code, k: k >>> 0, jt: 0, jf: 0 }); return this }
  /** Conditional jump: to `jt` when true, `jf` when false; 0 means the next instruction. */
  jump (code: number, k: number, jt: Target, jf: Target = 0): this { this.#code.push({ code, k: k >>> 0, jt, jf }); return this }
  label (name: string): this {
    if (this.#labels.has(name)) throw new Error(`BPF label ${name} defined twice`)
    this.#labels.set(name, this.#code.length)
    return this
  }

  assemble (): BpfInstruction[] {
    return this.#code.map((ins, pc) => ({ code: ins.code, k: ins.k, jt: this.#offset(pc, ins.jt), jf: this.#offset(pc, ins.jf) }))
  }

  #offset (pc: number, target: Target): number {
    if (target === 0) return 0
    const at = this.#labels.get(target)
    if (at === undefined) throw new Error(`BPF label ${target} is not defined`)
    const off = at - pc - 1
    if (off < 0 || off > 255) throw new Error(`BPF jump from ${pc} to ${target} (${at}) is out of range`)
    return off
  }
}

/** The policy as BPF instructions. Sync, deterministic. */
export function seccompInstructions (denied: DeniedAction = 'errno'): BpfInstruction[] {
  const a = new BpfAssembler()
  a.op(LD_W_ABS, OFF_ARCH)
    .jump(JEQ_K, AUDIT_ARCH_X86_64, 0, 'kill')
    .op(LD_W_ABS, OFF_NR)
    .jump(JGE_K, X32_SYSCALL_BIT, 'enosys')
  for (const nr of Object.values(DENIED_SYSCALLS)) a.jump(JEQ_K, nr, 'eperm')
  a.jump(JEQ_K, CLONE3_SYSCALL, 'enosys')
  for (const nr of Object.values(NAMESPACE_FLAG_SYSCALLS)) a.jump(JEQ_K, nr, 'nsflags')
  a.jump(JEQ_K, IOCTL_SYSCALL, 'ioctl')
    .op(RET_K, SECCOMP_RET_ALLOW)
  a.label('nsflags')
    .op(LD_W_ABS, argLow(0))
    .jump(JSET_K, CLONE_NAMESPACE_FLAGS, 'eperm')
    .op(RET_K, SECCOMP_RET_ALLOW)
  a.label('ioctl')
  for (const d of DENIED_IOCTLS) {
    a.op(LD_W_ABS, argLow(1))
    if (d.mask !== 0xffffffff) a.op(ALU_AND_K, d.mask)
    a.jump(JEQ_K, d.value, 'eperm')
  }
  a.op(RET_K, SECCOMP_RET_ALLOW)
  a.label('eperm').op(RET_K, denied === 'notify' ? SECCOMP_RET_USER_NOTIF : SECCOMP_RET_ERRNO | EPERM)
  a.label('enosys').op(RET_K, SECCOMP_RET_ERRNO | ENOSYS)
  a.label('kill').op(RET_K, SECCOMP_RET_KILL_PROCESS)
  return a.assemble()
}

/** The program as bubblewrap's `--seccomp FD` (and layerd-wall's `--seccomp-fd`) expect it: 8 bytes per instruction. Sync. */
export function compileSeccompFilter (denied: DeniedAction = 'errno'): Buffer {
  const ins = seccompInstructions(denied)
  const buf = Buffer.alloc(ins.length * 8)
  ins.forEach((x, i) => {
    buf.writeUInt16LE(x.code, i * 8)
    buf.writeUInt8(x.jt, i * 8 + 2)
    buf.writeUInt8(x.jf, i * 8 + 3)
    buf.writeUInt32LE(x.k, i * 8 + 4)
  })
  return buf
}

/** What a syscall looks like to a filter: `args` as unsigned 64-bit values. */
export interface SeccompData { nr: number, arch: number, args: bigint[] }

/**
 * Run a program over one syscall and return the filter's verdict (a
 * SECCOMP_RET_* value). Implements just the opcodes this module emits;
 * throws on anything else or on running off the end. Sync.
 */
export function runBpf (program: BpfInstruction[], data: SeccompData): number {
  const word = (off: number): number => {
    if (off === OFF_NR) return data.nr >>> 0
    if (off === OFF_ARCH) return data.arch >>> 0
    const i = (off - 16) / 8
    return Number((data.args[i] ?? 0n) & 0xffffffffn)
  }
  let acc = 0
  for (let pc = 0; pc < program.length; pc++) {
    const { code, jt, jf, k } = program[pc]!
    switch (code) {
      case LD_W_ABS: acc = word(k); break
      case ALU_AND_K: acc = (acc & k) >>> 0; break
      case JEQ_K: pc += acc === k ? jt : jf; break
      case JGE_K: pc += acc >= k ? jt : jf; break
      case JSET_K: pc += (acc & k) !== 0 ? jt : jf; break
      case RET_K: return k
      default: throw new Error(`BPF opcode 0x${code.toString(16)} at ${pc} is not supported`)
    }
  }
  throw new Error('BPF program ran off its end')
}
