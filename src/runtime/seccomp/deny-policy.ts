/**
 * The one seccomp policy both the process tier (a classic-BPF program for
 * bubblewrap, `bpf-filter.ts`) and the container tier (an OCI seccomp
 * profile for runc/crun, `oci-seccomp.ts`) are generated from. A deny list
 * over "allow everything else": the sandbox also runs without capabilities
 * (process tier) or with docker's default set minus the risky ones
 * (container tier), so this list targets what stays reachable without
 * capabilities, or is kernel attack surface, or reaches a host filesystem:
 *
 * - mounts and the new mount API, pivot_root: the sandbox's view of the
 *   filesystem is fixed;
 * - kernel code and state: module loading, kexec, bpf, perf_event_open,
 *   userfaultfd, io_uring, keyrings, reboot, swap, quota, clock setting,
 *   syslog, acct, iopl/ioperm;
 * - other processes' memory: ptrace, process_vm_readv/writev, kcmp,
 *   pidfd_getfd;
 * - file handles (open_by_handle_at walks around the mount's root: the
 *   "shocker" escape) and fanotify;
 * - namespaces: setns, and unshare/clone with any CLONE_NEW* flag (a new user
 *   namespace would hand an unprivileged process a full capability set over
 *   fresh mount and network namespaces); clone3 answers ENOSYS because its
 *   flags live in memory a filter cannot read, and glibc then falls back to
 *   clone, whose flags it can;
 * - ioctls that change inode flags or filesystem state on the writable
 *   layer's host filesystem (chattr, project ids, ext4/fscrypt/verity admin
 *   calls, freeze/trim/shutdown), FIEMAP/FIBMAP (host disk layout), the
 *   whole 'X' (XFS and generic fs admin) range, and TIOCSTI/TIOCLINUX
 *   (typing into a terminal).
 *
 * Everything denied fails with EPERM, so callers see a clean error.
 * Syscall numbers are x86_64's; other ABIs are refused by the filters.
 *
 * Pure: no fs, network or native code. Imports nothing.
 */

/** x86_64 numbers of the syscalls that always fail with EPERM. */
export const DENIED_SYSCALLS: Readonly<Record<string, number>> = {
  // mounts and the filesystem view
  mount: 165,
  umount2: 166,
  pivot_root: 155,
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  mount_setattr: 442,
  open_tree_attr: 467,
  // kernel code and state
  init_module: 175,
  finit_module: 313,
  delete_module: 176,
  create_module: 174,
  get_kernel_syms: 177,
  query_module: 178,
  kexec_load: 246,
  kexec_file_load: 320,
  bpf: 321,
  perf_event_open: 298,
  userfaultfd: 323,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  keyctl: 250,
  add_key: 248,
  request_key: 249,
  reboot: 169,
  swapon: 167,
  swapoff: 168,
  quotactl: 179,
  quotactl_fd: 443,
  nfsservctl: 180,
  acct: 163,
  syslog: 103,
  settimeofday: 164,
  clock_settime: 227,
  clock_adjtime: 305,
  adjtimex: 159,
  iopl: 172,
  ioperm: 173,
  lookup_dcookie: 212,
  uselib: 134,
  ustat: 136,
  sysfs: 139,
  _sysctl: 156,
  vhangup: 153,
  // other processes
  ptrace: 101,
  process_vm_readv: 310,
  process_vm_writev: 311,
  kcmp: 312,
  pidfd_getfd: 438,
  // file handles, fanotify
  open_by_handle_at: 304,
  name_to_handle_at: 303,
  fanotify_init: 300,
  // namespaces (unshare and clone are checked by flag, below)
  setns: 308
}

/** Syscalls allowed only without a namespace flag: flags are argument 0 of both on x86_64. */
export const NAMESPACE_FLAG_SYSCALLS: Readonly<Record<string, number>> = { unshare: 272, clone: 56 }
/** clone3: answered ENOSYS so that libc falls back to clone (flags in memory cannot be filtered). */
export const CLONE3_SYSCALL = 435
export const IOCTL_SYSCALL = 16

/** CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET. */
export const CLONE_NAMESPACE_FLAGS = 0x80 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

/**
 * One denied ioctl request pattern: denied when `(request & mask) === value`,
 * comparing only the low 32 bits (the kernel truncates the request to an
 * unsigned int, so the upper half of the register must not let a caller
 * slip past an exact match).
 */
export interface DeniedIoctl { name: string, mask: number, value: number }

const TYPE_AND_NR = 0xffff // ignores direction and size, so 32- and 64-bit variants both match
const EXACT = 0xffffffff
const ioc = (type: string, nr: number): number => (type.charCodeAt(0) << 8) | nr

export const DENIED_IOCTLS: readonly DeniedIoctl[] = [
  { name: 'FS_IOC_SETFLAGS', mask: TYPE_AND_NR, value: ioc('f', 2) },
  { name: 'EXT4_IOC_SETVERSION', mask: TYPE_AND_NR, value: ioc('f', 4) },
  { name: 'EXT4_IOC_GROUP_EXTEND', mask: TYPE_AND_NR, value: ioc('f', 7) },
  { name: 'EXT4_IOC_GROUP_ADD', mask: TYPE_AND_NR, value: ioc('f', 8) },
  { name: 'EXT4_IOC_MIGRATE', mask: TYPE_AND_NR, value: ioc('f', 9) },
  { name: 'FS_IOC_FIEMAP', mask: TYPE_AND_NR, value: ioc('f', 11) },
  { name: 'EXT4_IOC_ALLOC_DA_BLKS', mask: TYPE_AND_NR, value: ioc('f', 12) },
  { name: 'EXT4_IOC_MOVE_EXT', mask: TYPE_AND_NR, value: ioc('f', 15) },
  { name: 'EXT4_IOC_RESIZE_FS', mask: TYPE_AND_NR, value: ioc('f', 16) },
  { name: 'EXT4_IOC_SWAP_BOOT', mask: TYPE_AND_NR, value: ioc('f', 17) },
  { name: 'EXT4_IOC_PRECACHE_EXTENTS', mask: TYPE_AND_NR, value: ioc('f', 18) },
  { name: 'FS_IOC_SET_ENCRYPTION_POLICY', mask: TYPE_AND_NR, value: ioc('f', 19) },
  { name: 'FS_IOC_ADD_ENCRYPTION_KEY', mask: TYPE_AND_NR, value: ioc('f', 23) },
  { name: 'FS_IOC_REMOVE_ENCRYPTION_KEY', mask: TYPE_AND_NR, value: ioc('f', 24) },
  { name: 'FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS', mask: TYPE_AND_NR, value: ioc('f', 25) },
  { name: 'EXT4_IOC_CLEAR_ES_CACHE', mask: TYPE_AND_NR, value: ioc('f', 40) },
  { name: 'EXT4_IOC_CHECKPOINT', mask: TYPE_AND_NR, value: ioc('f', 43) },
  { name: 'EXT4_IOC_SETFSUUID', mask: TYPE_AND_NR, value: ioc('f', 44) },
  { name: 'FS_IOC_ENABLE_VERITY', mask: TYPE_AND_NR, value: ioc('f', 133) },
  { name: 'FS_IOC_SETVERSION', mask: TYPE_AND_NR, value: ioc('v', 2) },
  { name: 'FS_IOC_SETFSLABEL', mask: TYPE_AND_NR, value: 0x9432 },
  // The whole 'X' range: FS_IOC_FSSETXATTR (project ids, inode flags), FIFREEZE,
  // FITHAW, FITRIM, FS_IOC_GOINGDOWN/EXT4_IOC_SHUTDOWN and every XFS ioctl.
  { name: "'X' range (XFS, FS_IOC_FSSETXATTR, FIFREEZE, FITRIM, GOINGDOWN)", mask: 0xff00, value: 0x5800 },
  { name: 'FIBMAP', mask: EXACT, value: 1 },
  { name: 'TIOCSTI', mask: EXACT, value: 0x5412 },
  { name: 'TIOCLINUX', mask: EXACT, value: 0x541c }
]

/** Well-known request numbers, for tests and messages. */
export const IOCTL = {
  FS_IOC_GETFLAGS: 0x80086601,
  FS_IOC_SETFLAGS: 0x40086602,
  FS_IOC32_SETFLAGS: 0x40046602,
  FS_IOC_FSGETXATTR: 0x801c581f,
  FS_IOC_FSSETXATTR: 0x401c5820,
  FS_IOC_FIEMAP: 0xc020660b,
  FIFREEZE: 0xc0045877,
  TIOCSTI: 0x5412,
  FIONREAD: 0x541b
} as const

/** `(request & mask) === value` on the low 32 bits: the decision both filters implement. */
export function isDeniedIoctl (request: number | bigint): boolean {
  const low = Number(BigInt(request) & 0xffffffffn)
  return DENIED_IOCTLS.some(d => ((low & d.mask) >>> 0) === d.value)
}

export const EPERM = 1
export const ENOSYS = 38
