import t from 'tap'
import {
  AUDIT_ARCH_X86_64, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, SECCOMP_RET_KILL_PROCESS, X32_SYSCALL_BIT,
  compileSeccompFilter, runBpf, seccompInstructions
} from './bpf-filter.js'
import { DENIED_IOCTLS, DENIED_SYSCALLS, ENOSYS, EPERM, IOCTL, isDeniedIoctl } from './deny-policy.js'
import { ociSeccompProfile } from './oci-seccomp.js'

const program = seccompInstructions()
const call = (nr: number, ...args: Array<number | bigint>): number =>
  runBpf(program, { nr, arch: AUDIT_ARCH_X86_64, args: args.map(a => BigInt(a)) })
const DENY = SECCOMP_RET_ERRNO | EPERM

t.test('seccompInstructions() denies every listed syscall with EPERM and allows ordinary ones', async t => {
  for (const [name, nr] of Object.entries(DENIED_SYSCALLS)) t.equal(call(nr), DENY, name)
  // read, write, openat, execve, mkdir, fork, kill, chroot
  for (const nr of [0, 1, 257, 59, 83, 57, 62, 161]) t.equal(call(nr), SECCOMP_RET_ALLOW, `syscall ${nr}`)
})

t.test('seccompInstructions() refuses other ABIs: i386 is killed, x32 gets ENOSYS', async t => {
  t.equal(runBpf(program, { nr: 1, arch: 0x40000003, args: [] }), SECCOMP_RET_KILL_PROCESS)
  t.equal(call(X32_SYSCALL_BIT + 165), SECCOMP_RET_ERRNO | ENOSYS)
  t.equal(call(X32_SYSCALL_BIT + 1), SECCOMP_RET_ERRNO | ENOSYS)
})

t.test('seccompInstructions() checks namespace flags of unshare and clone, and sends clone3 to ENOSYS', async t => {
  const CLONE_NEWUSER = 0x10000000
  const CLONE_NEWNS = 0x00020000
  const threadFlags = 0x3d0f00 // CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
  t.equal(call(272, CLONE_NEWUSER), DENY, 'unshare(CLONE_NEWUSER)')
  t.equal(call(272, CLONE_NEWNS), DENY, 'unshare(CLONE_NEWNS)')
  t.equal(call(272, 0x400), SECCOMP_RET_ALLOW, 'unshare(CLONE_FILES)')
  t.equal(call(56, threadFlags), SECCOMP_RET_ALLOW, 'clone for a thread')
  t.equal(call(56, 17 /* SIGCHLD: fork */), SECCOMP_RET_ALLOW, 'clone for fork')
  t.equal(call(56, 17 | CLONE_NEWUSER), DENY, 'clone with CLONE_NEWUSER')
  t.equal(call(435), SECCOMP_RET_ERRNO | ENOSYS, 'clone3')
})

t.test('seccompInstructions() denies the listed ioctls by their low 32 bits only', async t => {
  for (const req of [IOCTL.FS_IOC_SETFLAGS, IOCTL.FS_IOC32_SETFLAGS, IOCTL.FS_IOC_FSSETXATTR, IOCTL.FS_IOC_FSGETXATTR,
    IOCTL.FS_IOC_FIEMAP, IOCTL.FIFREEZE, IOCTL.TIOCSTI]) {
    t.equal(call(16, 3, req), DENY, `0x${req.toString(16)}`)
    // upper bits set in the register: the kernel ignores them, so must the filter
    t.equal(call(16, 3, (0xdeadbeefn << 32n) | BigInt(req)), DENY, `0x${req.toString(16)} with garbage high bits`)
  }
  for (const req of [IOCTL.FS_IOC_GETFLAGS, IOCTL.FIONREAD, 0x5401 /* TCGETS */]) t.equal(call(16, 3, req), SECCOMP_RET_ALLOW, `0x${req.toString(16)}`)
})

t.test('seccompInstructions() agrees with isDeniedIoctl() over a sweep of request numbers', async t => {
  let checked = 0
  for (let type = 0; type < 256; type += 3) {
    for (let nr = 0; nr < 256; nr += 5) {
      const req = 0x40080000 | (type << 8) | nr
      t.equal(call(16, 0, req) === DENY, isDeniedIoctl(req))
      checked++
    }
  }
  for (const d of DENIED_IOCTLS) t.equal(call(16, 0, d.value), DENY, d.name)
  t.ok(checked > 4000)
})

t.test('compileSeccompFilter() lays out 8-byte little-endian sock_filter records', async t => {
  const buf = compileSeccompFilter()
  t.equal(buf.length, program.length * 8)
  t.equal(buf.readUInt16LE(0), 0x20, 'first instruction loads a word')
  t.equal(buf.readUInt32LE(4), 4, '… at the arch offset')
  t.equal(buf.readUInt32LE(12), AUDIT_ARCH_X86_64)
  t.ok(program.length < 4096, 'within BPF_MAXINSNS')
})

t.test('ociSeccompProfile() carries the same denials as the BPF program', async t => {
  const p = ociSeccompProfile()
  t.equal(p.defaultAction, 'SCMP_ACT_ALLOW')
  t.same(p.architectures, ['SCMP_ARCH_X86_64'])
  const denied = new Set(p.syscalls.filter(r => r.args === undefined && r.errnoRet === EPERM).flatMap(r => r.names))
  for (const name of Object.keys(DENIED_SYSCALLS)) t.ok(denied.has(name), name)
  const ioctlRules = p.syscalls.filter(r => r.names[0] === 'ioctl')
  t.equal(ioctlRules.length, DENIED_IOCTLS.length)
  for (const r of ioctlRules) t.ok(r.args![0]!.value <= 0xffffffff && r.args![0]!.op === 'SCMP_CMP_MASKED_EQ')
  t.ok(p.syscalls.some(r => r.names[0] === 'unshare' && r.args![0]!.value === 0x10000000), 'unshare(CLONE_NEWUSER) rule')
  t.ok(p.syscalls.some(r => r.names.includes('clone3') && r.errnoRet === ENOSYS))
})
