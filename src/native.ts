/**
 * Typed loader for layerd's native addon (native/layerd_native.c): the few
 * system calls Node lacks — extended attributes that do not follow symlinks,
 * and mknod for device nodes and fifos — FastCDC's cut search for push
 * (native/fastcdc.c), and a FUSE server that speaks the kernel protocol
 * (native/fuse_server.c, used by src/fs/kernel-fuse.ts), file descriptors
 * passed over Unix sockets (native/fd_passing.c), which keep FUSE
 * connections alive across a daemon restart (src/holder/), and malloc and
 * page-cache calls for the daemon's memory (native/memory.c).
 *
 * The addon is built by `npm run build` (node-gyp) into
 * native/build/Release/layerd_native.node and loaded lazily, on the first
 * call, so modules that merely import this one work without it. Every
 * function is synchronous and throws a Node-style errno error (`code`
 * 'ENOENT', 'ENODATA', 'ENOTSUP', …; `syscall`; `path`) on failure, or an
 * UnsupportedError when the addon has not been built.
 *
 * Imports only src/errors.ts.
 */
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { dirname, join } from 'node:path'
import { existsSync } from 'node:fs'
import { UnsupportedError } from './errors.js'

/** Flags for {@link lsetxattr}, as in <sys/xattr.h>. */
export const XATTR_CREATE = 1
export const XATTR_REPLACE = 2

interface NativeBinding extends Partial<NativeFuseServerBinding>, Partial<NativeFdPassing> {
  version (): number
  llistxattr (path: string): string[]
  lgetxattr (path: string, name: string): Buffer
  lsetxattr (path: string, name: string, value: Uint8Array, flags: number): void
  mknod (path: string, mode: number, major: number, minor: number): void
  mount? (source: string, target: string, fstype: string, flags: number, data: string): void
  umount2? (target: string, flags: number): void
  mountLoop? (file: string, target: string, fstype: string, flags: number, data: string, runs?: ReadonlyArray<readonly [number, Uint8Array]>): void
  mountAt? (cwd: string, source: string, target: string, fstype: string, flags: number, data: string): void
  fastcdcNext? (data: Uint8Array, from: number, state: Int32Array, params: Int32Array, gear: Int32Array): number
  flock? (fd: number, operation: number): boolean
  mallocStats? (): MallocStats
  mallocTrim? (): boolean
  mallocArenaMax? (n: number): boolean
  mallocMmapThreshold? (n: number): boolean
  unmapCleanFilePages? (): number
  adviseMappedFile? (path: string, advice: number): number
  fadviseDontNeed? (fd: number, offset: number, length: number): void
  fadviseRandom? (fd: number, random: boolean): void
  lstatEntry? (path: string, out: Float64Array): string[]
  spawnVfork?: NativeSpawnVfork
  childWatchExit?: NativeChildWatchExit
  seccompSupervise?: NativeSeccompSupervisor['seccompSupervise']
  seccompSupervisorStop?: NativeSeccompSupervisor['seccompSupervisorStop']
  seccompListenSocket?: NativeSeccompSupervisor['seccompListenSocket']
  openInRoot? (rootFd: number, path: string, flags: number, mode: number): number
}

/** glibc malloc's counters (mallinfo2, summed over arenas), in bytes. */
export interface MallocStats {
  /** Bytes obtained with sbrk/mmap for arenas (the main heap and thread arenas). */
  arenaBytes: number
  /** Bytes in chunks mmap()ed on their own (allocations ≥ the mmap threshold). */
  mmapBytes: number
  inUseBytes: number
  /** Free bytes inside arenas: what malloc_trim may give back. */
  freeBytes: number
  topReleasableBytes: number
}

export type MappedFileAdvice = 'unmap' | 'cold' | 'pageout'
const MAPPED_FILE_ADVICE: Record<MappedFileAdvice, number> = { unmap: 0, cold: 1, pageout: 2 }

/** The addon's malloc and page-cache calls (native/memory.c). */
export interface NativeMemory {
  mallocStats: () => MallocStats
  /** malloc_trim(0): the free pages of every arena go back to the system. True when some were released. */
  mallocTrim: () => boolean
  /** mallopt(M_ARENA_MAX, n): cap the arenas threads create (glibc makes up to 8 per core). */
  mallocArenaMax: (n: number) => boolean
  /**
   * mallopt(M_MMAP_THRESHOLD, n): every allocation of n bytes or more gets its own mmap, and its free() gives it
   * back to the system at once (glibc otherwise raises the threshold after each such free, up to 32 MiB, and keeps
   * the freed chunks in its arenas until a trim).
   */
  mallocMmapThreshold: (n: number) => boolean
  /**
   * MADV_DONTNEED on this process's private, non-writable file mappings that hold no private copy of a page (the
   * node binary's and the libraries' text and read-only data): our page-table entries go, the pages stay in the
   * page cache (shared with every process mapping the file) and fault back in on the next access. Returns the bytes advised.
   */
  unmapCleanFilePages: () => number
  /**
   * madvise on every read-only shared mapping of `path` in this process (writable or private ones are left alone):
   * 'unmap' (MADV_DONTNEED: our page-table entries go, the pages stay in the page cache and fault back in),
   * 'cold' (MADV_COLD), 'pageout' (MADV_PAGEOUT: reclaim them now). Returns the bytes advised (0: no such mapping).
   */
  adviseMappedFile: (path: string, advice: MappedFileAdvice) => number
  /** posix_fadvise(POSIX_FADV_DONTNEED): drop the clean page cache of a range of an open file (length 0: to its end). */
  fadviseDontNeed: (fd: number, offset: number, length: number) => void
  /** posix_fadvise(POSIX_FADV_RANDOM) on all of an open file: the kernel reads no more than each read asks (no readahead) through this open file; `false`: POSIX_FADV_NORMAL again. */
  fadviseRandom: (fd: number, random: boolean) => void
}

/** An opaque handle to a running kernel-protocol FUSE server (native/fuse_server.c). */
export type NativeFuseServer = object & { readonly __brand: 'NativeFuseServer' }

export interface NativeFuseServerOptions {
  entryValidS: number
  attrValidS: number
  negativeValidS: number
  maxPages: number
  maxReadahead: number
  /** 1: offer FUSE_PASSTHROUGH in INIT, so OPEN is answered and files with a backing file read in the kernel (native/fuse_passthrough.h). Absent: 0. */
  passthrough?: number
}

/** What the server is started with: its options and the errno table it answers with (src/fs/fuse-errnos.ts's FuseErrnos). */
export interface NativeFuseServerStart extends NativeFuseServerOptions { errnos: Readonly<Record<string, number>> }

/** What a connection's INIT negotiated: the kernel's request and our answer (flags are bit sets). */
export interface NativeFuseInit {
  kernelMajor: number
  kernelMinor: number
  kernelFlags: number
  kernelFlags2: number
  replyFlags: number
}

/** {@link NativeFuseInit} as the server reports it, with what a takeover needs to know. */
export interface NativeFuseInitInfo extends NativeFuseInit {
  maxReadahead: number
  /** The kernel can resend requests a dead server had read (FUSE_HAS_RESEND, protocol 7.40). */
  canResend: boolean
  /** After a takeover: why FUSE_NOTIFY_RESEND failed, or null. */
  resendError: string | null
  /** FUSE_PASSTHROUGH was settled: backing files can be attached. */
  passthrough: boolean
}

export type NativeFuseEvent = (kind: number, unique: bigint, nodeid: number, offset: number, size: number) => void

/** The FUSE server of the addon; src/fs/kernel-fuse.ts is its only user. */
export interface NativeFuseServerBinding {
  /** Mount (mount(2), read-only, nosuid, nodev) and start serving `table`. `onEvent(kind, unique, nodeid, offset, size)`: 1 INIT answered, 2 READ, 3 connection ended. Throws Error with the errno name as `code`. */
  fuseServerMount (mountpoint: string, fsName: string, mountOptions: string, options: NativeFuseServerStart, table: Buffer,
    onEvent: NativeFuseEvent): NativeFuseServer
  /**
   * Serve a connection another process mounted and INITed (`fd`: this
   * process's own copy, owned by the server from here; `table`: the one that
   * process served), then send FUSE_NOTIFY_RESEND. No INIT event comes.
   * Throws (code ENOTSUP) when `init` says the kernel cannot resend.
   */
  fuseServerAttach (fd: number, options: NativeFuseServerStart, table: Buffer, init: NativeFuseInit, onEvent: NativeFuseEvent): NativeFuseServer
  /** The INIT negotiation of a served connection (zeros before INIT). */
  fuseServerInit (server: NativeFuseServer): NativeFuseInitInfo
  /** The connection's /dev/fuse fd; the server owns it (never close it). */
  fuseServerFd (server: NativeFuseServer): number
  fuseServerReply (server: NativeFuseServer, unique: bigint, data: Buffer, length: number): void
  /** `errno` positive. */
  fuseServerReplyError (server: NativeFuseServer, unique: bigint, errno: number): void
  fuseServerCounters (server: NativeFuseServer): { requests: number, lookups: number, readdirs: number, opens: number, reads: number, repliesFailed: number, passthroughOpens: number }
  /**
   * Passthrough (only where INIT settled it; otherwise they throw, code ENOTSUP).
   * Attach: register `fd` (a read-only open of the node's backing file; it
   * stays the caller's) with FUSE_DEV_IOC_BACKING_OPEN and offer it to new
   * opens of `nodeid`; returns the backing id (the one already in use, if
   * files still read through an earlier one). Throws with the errno name as `code`.
   */
  fuseServerBackingAttach (server: NativeFuseServer, nodeid: number, fd: number): number
  /** Offer `id`, registered by an earlier daemon on this connection, to new opens of `nodeid` (after a takeover). */
  fuseServerBackingInherit (server: NativeFuseServer, nodeid: number, id: number): void
  /** Stop offering `nodeid`'s backing file; its id is closed once no open file uses it. Returns whether it had one. */
  fuseServerBackingRetire (server: NativeFuseServer, nodeid: number): boolean
  /**
   * FUSE_NOTIFY_INVAL_INODE (whole file) for each node id: the kernel drops
   * its cached pages of those files. Written on a libuv worker (the kernel
   * waits for pages under read, whose replies come from the JS thread).
   * Resolves with the notifications taken (a node the kernel forgot is
   * skipped; an ended connection stops early); rejects (code ERR_FUSE_NOTIFY) on another error.
   */
  fuseServerInvalidate (server: NativeFuseServer, nodeids: Uint32Array): Promise<number>
}

const ADDON_RELATIVE_PATH = 'native/build/Release/layerd_native.node'
let binding: NativeBinding | undefined

/** Path of the built addon: the repository root is found by walking up from this module (src/ or dist/src/). */
function addonPath (): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 4; i++) {
    const candidate = join(dir, ADDON_RELATIVE_PATH)
    if (existsSync(candidate)) return candidate
    dir = dirname(dir)
  }
  throw new UnsupportedError(`layerd native addon not found (${ADDON_RELATIVE_PATH}): run \`npm run build\``)
}

function load (): NativeBinding {
  if (binding === undefined) {
    const path = addonPath()
    try {
      binding = createRequire(import.meta.url)(path) as NativeBinding
    } catch (err) {
      throw new UnsupportedError(`cannot load layerd native addon ${path}: ${(err as Error).message}`, { cause: err })
    }
  }
  return binding
}

/** The addon's FUSE server. Sync; throws UnsupportedError when the addon is missing or older than version 3. */
export function nativeFuseServer (): NativeFuseServerBinding {
  const b = load()
  if (b.fuseServerMount === undefined || b.fuseServerAttach === undefined) throw new UnsupportedError('layerd native addon has no FUSE server with takeover (built before version 5): run `npm run build`')
  return b as NativeFuseServerBinding
}

/** One message received with its file descriptors (close-on-exec). */
export interface FdMessage { data: Buffer, fds: number[] }

/** File descriptors over Unix sockets (native/fd_passing.c). */
export interface NativeFdPassing {
  /** socketpair(AF_UNIX, SOCK_SEQPACKET), both ends close-on-exec. */
  fdSocketPair (): [number, number]
  /** One message with `fds` attached (SCM_RIGHTS, at most 64). Throws errno errors (EPIPE: the peer is gone). */
  fdSend (sock: number, data: Buffer, fds: number[]): void
  /** One message, waiting at most `timeoutMs` (< 0: no limit); null at end of stream. Throws errno errors (ETIMEDOUT, EMSGSIZE). */
  fdRecv (sock: number, maxBytes: number, timeoutMs: number): FdMessage | null
  /** One message, waited for on a libuv worker thread. */
  fdRecvAsync (sock: number, maxBytes: number, callback: (err: NodeJS.ErrnoException | null, message: FdMessage | null) => void): void
  /** Set FD_CLOEXEC (for fds inherited from systemd). */
  fdSetCloexec (fd: number): void
  /** One datagram to systemd's notify socket (a path, or '@name' for the abstract namespace), `fds` attached. */
  sdNotify (socketPath: string, message: string, fds: number[]): void
  /**
   * Call `callback` once, on the event loop, when the peer of the connected
   * socket `sock` has closed (uv_poll): with null when it hung up, with the
   * socket's error when it reset (ECONNRESET: it closed with messages of
   * ours unread). Messages it sent before stay to be read. `sock` must stay
   * open until then. The watch does not keep the process alive. Sync;
   * throws errno errors (ENOTSOCK, EBADF).
   */
  fdWatchHangup (sock: number, callback: (err: NodeJS.ErrnoException | null) => void): void
}

/** The addon's fd passing. Sync; throws UnsupportedError when the addon is missing or older than version 11. */
export function nativeFdPassing (): NativeFdPassing {
  const b = load()
  if (b.fdSend === undefined || b.fdRecv === undefined || b.fdRecvAsync === undefined || b.fdSocketPair === undefined ||
    b.fdSetCloexec === undefined || b.sdNotify === undefined || b.fdWatchHangup === undefined) {
    throw new UnsupportedError('layerd native addon has no fd passing with hang-up watch (built before version 11): run `npm run build`')
  }
  return b as NativeFdPassing
}

/**
 * Watching the exit of a child that neither libuv nor spawnVfork started
 * (native/spawn.c): a pidfd on the event loop, as spawnVfork's own.
 * `onExit(code, signal)` runs once, right after the child is reaped in the
 * same tick: the exit code with signal 0, or code -1 and the killing signal.
 * Until then its pid stays the child's. Sync; throws errno errors (ECHILD:
 * not a child of this process).
 */
export type NativeChildWatchExit = (pid: number, onExit: (code: number, signal: number) => void) => void

/** The addon's child exit watch. Sync; throws UnsupportedError when the addon is missing or older than version 11. */
export function nativeChildWatchExit (): NativeChildWatchExit {
  const b = load()
  if (b.childWatchExit === undefined) throw new UnsupportedError('layerd native addon has no childWatchExit (built before version 11): run `npm run build`')
  return b.childWatchExit.bind(b)
}

/** mount(2) flags, as in <sys/mount.h>. */
export const MS_RDONLY = 1
export const MS_NOSUID = 2
export const MS_NODEV = 4
export const MS_NOATIME = 1024
/** umount2(2) flag: detach now, clean up when no longer busy. */
export const MNT_DETACH = 2

export interface NativeMounts {
  /** mount(2). Throws errno errors. */
  mount: (source: string, target: string, fstype: string, flags: number, data: string) => void
  /** umount2(2). Throws errno errors (EINVAL: not a mount point). */
  umount2: (target: string, flags: number) => void
  /**
   * `mount -o loop`: `file` on a self-clearing loop device, mounted at
   * `target`; `runs` (`[offset, bytes]`) are written to the device first
   * (through it, not into the file: the kernel fsyncs the file when the
   * device is set up). Throws errno errors (syscall 'write' for a run).
   */
  mountLoop: (file: string, target: string, fstype: string, flags: number, data: string, runs?: ReadonlyArray<readonly [number, Uint8Array]>) => void
  /** mount(2) with `target` and paths in `data` relative to `cwd` (the mount table then shows them relative). Throws errno errors. */
  mountAt: (cwd: string, source: string, target: string, fstype: string, flags: number, data: string) => void
}

/** The addon's mount calls. Sync; throws UnsupportedError when the addon is missing or older than version 9. */
export function nativeMounts (): NativeMounts {
  const b = load()
  if (b.mount === undefined || b.umount2 === undefined || b.mountLoop === undefined || b.mountAt === undefined || b.version() < 9) {
    throw new UnsupportedError('layerd native addon has no mount calls or no mountLoop runs (built before version 9): run `npm run build`')
  }
  return { mount: b.mount.bind(b), umount2: b.umount2.bind(b), mountLoop: b.mountLoop.bind(b), mountAt: b.mountAt.bind(b) }
}

/**
 * FastCDC's cut search (native/fastcdc.c): the CdcScanner contract of
 * src/format/chunker.ts, with the gear table as a last argument. Sync;
 * throws UnsupportedError when the addon is missing or older than version 4.
 */
export function nativeFastCdcNext (): (data: Uint8Array, from: number, state: Int32Array, params: Int32Array, gear: Int32Array) => number {
  const b = load()
  if (b.fastcdcNext === undefined) throw new UnsupportedError('layerd native addon has no FastCDC scan (built before version 4): run `npm run build`')
  return b.fastcdcNext.bind(b)
}

/** flock(2) operations, as in <sys/file.h>. */
export const LOCK_SH = 1
export const LOCK_EX = 2
export const LOCK_NB = 4
export const LOCK_UN = 8

/**
 * flock(2) on `fd` (from fs.openSync). The lock belongs to the open file
 * description: it lasts until LOCK_UN or until every fd sharing it is closed
 * (the process exiting, however it exits). With LOCK_NB: false when another
 * holder has a conflicting lock, true once taken; without it, blocks. Sync;
 * throws errno errors (EBADF, EINVAL, ENOLCK), UnsupportedError when the
 * addon is missing or older than version 5.
 */
export function flock (fd: number, operation: number): boolean {
  const b = load()
  if (b.flock === undefined) throw new UnsupportedError('layerd native addon has no flock (built before version 5): run `npm run build`')
  return b.flock(fd, operation)
}

/**
 * posix_spawn (clone with CLONE_VM | CLONE_VFORK: no copy of this process's
 * page tables, unlike libuv's fork) with `pipes` pipes as the child's fds
 * 0 .. pipes-1 (fd 0 and 3.. read by the child, 1 and 2 written by it; the
 * parent's ends are returned), signal dispositions reset, and the exit
 * watched on this event loop through a pidfd: `onExit(code, signal)` once the
 * child is reaped (code -1 when a signal ended it). `path` is the program
 * itself, not searched in PATH. Throws errno errors (ENOENT, EACCES; syscall
 * 'posix_spawn'); UnsupportedError when the addon is older than version 10
 * (native/spawn.c).
 */
export type NativeSpawnVfork = (path: string, argv: string[], envp: string[], cwd: string | null, pipes: number, onExit: (code: number, signal: number) => void, inheritFds?: number[]) => { pid: number, fds: number[] }

/** One message from a seccomp supervisor thread (native/seccomp_supervisor.c). */
export type SupervisorMessage =
  | { ended: false, time: number, pid: number, nspid: number, nr: number, comm: string, path?: string, args: bigint[] }
  | { ended: true, dropped: number, answered: number, error?: string }

/**
 * Seccomp user-notification supervisors, each on its own thread, answering
 * every notification EPERM before telling JavaScript (native/seccomp_supervisor.c).
 */
export interface NativeSeccompSupervisor {
  /**
   * Start a supervisor that takes ownership of `sourceFd`: mode 0, a connected
   * socket the listener fd arrives on; mode 1, a listening socket one peer
   * (runc) connects to and sends it on. `pathRules` holds [syscall nr, arg
   * index] pairs whose argument is a path to read from the caller's memory.
   * Events pass a token bucket (`burst`, `refillPerSecond`); the rest are
   * counted in the final message's `dropped`. Returns the stop fd. Sync.
   */
  seccompSupervise: (sourceFd: number, mode: 0 | 1, pathRules: Int32Array, burst: number, refillPerSecond: number, onMessage: (m: SupervisorMessage) => void) => number
  /** End the supervisor; valid until its ended message has arrived. Sync. */
  seccompSupervisorStop: (stopFd: number) => void
  /** A listening unix stream socket at `path`, close-on-exec. Sync; throws EADDRINUSE etc. */
  seccompListenSocket: (path: string) => number
}

/** The addon's seccomp supervisor. Sync; throws UnsupportedError when the addon is missing or older than version 12. */
export function nativeSeccompSupervisor (): NativeSeccompSupervisor {
  const b = load()
  if (b.seccompSupervise === undefined || b.seccompSupervisorStop === undefined || b.seccompListenSocket === undefined) {
    throw new UnsupportedError('layerd native addon has no seccomp supervisor (built before version 12): run `npm run build`')
  }
  return b as NativeSeccompSupervisor
}

/** The static helper that raises Landlock and the notifying seccomp filter inside a sandbox (native/layerd_wall.c). */
export function layerdWallPath (): string {
  return join(dirname(addonPath()), 'layerd-wall')
}

/** The addon's posix_spawn. Sync; throws UnsupportedError when the addon is missing or older than version 10. */
export function nativeSpawnVfork (): NativeSpawnVfork {
  const b = load()
  if (b.spawnVfork === undefined) throw new UnsupportedError('layerd native addon has no spawnVfork (built before version 10): run `npm run build`')
  return b.spawnVfork.bind(b)
}

/** The addon's malloc and page-cache calls. Sync; throws UnsupportedError when the addon is missing or older than version 7. */
export function nativeMemory (): NativeMemory {
  const b = load()
  if (b.mallocStats === undefined || b.mallocTrim === undefined || b.mallocArenaMax === undefined || b.mallocMmapThreshold === undefined || b.unmapCleanFilePages === undefined || b.adviseMappedFile === undefined || b.fadviseDontNeed === undefined || b.fadviseRandom === undefined) {
    throw new UnsupportedError('layerd native addon lacks some memory calls (built before this checkout): run `npm run build`')
  }
  return {
    mallocStats: b.mallocStats.bind(b),
    mallocTrim: b.mallocTrim.bind(b),
    mallocArenaMax: b.mallocArenaMax.bind(b),
    mallocMmapThreshold: b.mallocMmapThreshold.bind(b),
    unmapCleanFilePages: b.unmapCleanFilePages.bind(b),
    adviseMappedFile: (path, advice) => b.adviseMappedFile!(path, MAPPED_FILE_ADVICE[advice]),
    fadviseDontNeed: b.fadviseDontNeed.bind(b),
    fadviseRandom: b.fadviseRandom.bind(b)
  }
}

/** Addon interface version (2: xattrs and mknod; 3: the FUSE server, mount, umount2, loop devices; 4: FastCDC; 5: flock; 6: FUSE takeover, fd passing; 7: malloc and page-cache calls; 8: lstatEntry; 9: mountLoop's runs; 12: openInRoot). Sync. */
export function nativeVersion (): number {
  return load().version()
}

/**
 * openat2(2) of `path` under the directory `rootFd` with RESOLVE_IN_ROOT and
 * RESOLVE_NO_MAGICLINKS: `..`, absolute paths and symlinks (absolute ones
 * too) resolve as if `rootFd` were `/`, so nothing outside it is reached, and
 * /proc magic links are refused (ELOOP). `flags` are open(2) flags (fs.constants);
 * O_CLOEXEC is added. Returns the fd (close it with fs.closeSync). Sync; throws
 * errno errors (syscall 'openat2'), UnsupportedError when the addon is older than version 13.
 */
export function openInRoot (rootFd: number, path: string, flags: number, mode = 0): number {
  const b = load()
  if (b.openInRoot === undefined) throw new UnsupportedError('layerd native addon has no openInRoot (built before version 13): run `npm run build`')
  return b.openInRoot(rootFd, path, flags, mode)
}

/** Names of the extended attributes of `path`, not following a final symlink. Sync; throws errno errors. */
export function llistxattr (path: string): string[] {
  return load().llistxattr(path)
}

/**
 * lstat of `path` and the names of its extended attributes, in one call
 * (push's directory walk). Fills `out`, a Float64Array of 14: mode, uid,
 * gid, size, nlink, mtime's whole seconds, dev and ino as high and low 32
 * bits, rdev's major and minor, llistxattr's errno (0: none), and 1 when
 * size is exact (native/entry_stat.c); returns the names. Sync; throws an errno
 * error (syscall 'lstat') when lstat fails; an llistxattr failure is not
 * thrown: its errno is in `out` and the names are [].
 */
export function lstatEntry (path: string, out: Float64Array): string[] {
  const b = load()
  if (b.lstatEntry === undefined) throw new UnsupportedError('layerd native addon has no lstatEntry (built before version 8): run `npm run build`')
  return b.lstatEntry(path, out)
}

/** Value of one extended attribute of `path` (a new Buffer), not following a final symlink. Sync; ENODATA when absent. */
export function lgetxattr (path: string, name: string): Buffer {
  return load().lgetxattr(path, name)
}

/** Set one extended attribute of `path`, not following a final symlink. Sync; `flags` is 0, XATTR_CREATE or XATTR_REPLACE. */
export function lsetxattr (path: string, name: string, value: Uint8Array, flags = 0): void {
  load().lsetxattr(path, name, value, flags)
}

/**
 * Create a device node or fifo. `mode` carries the file type bits
 * (fs.constants.S_IFCHR, S_IFBLK, S_IFIFO) and the permission bits (the
 * umask applies). Sync; throws errno errors (EEXIST, EPERM, …).
 */
export function mknod (path: string, mode: number, major: number, minor: number): void {
  load().mknod(path, mode, major, minor)
}

/** All extended attributes of `path` (values base64), not following a final symlink; undefined when there are none. Sync. */
export function readXattrs (path: string): Record<string, string> | undefined {
  const names = llistxattr(path)
  if (names.length === 0) return undefined
  const out: Record<string, string> = {}
  for (const name of names.sort()) {
    try {
      out[name] = lgetxattr(path, name).toString('base64')
    } catch (err) {
      // Removed between list and get: it is simply no longer there.
      if ((err as NodeJS.ErrnoException).code !== 'ENODATA') throw err
    }
  }
  return Object.keys(out).length > 0 ? out : undefined
}
