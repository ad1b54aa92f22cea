/**
 * The one module that imports the FUSE binding (`fuse-native`; its
 * maintained fork `@cocalc/fuse-native` has the same API and internals, so
 * swapping is a one-line change of BINDING_MODULE).
 *
 * What this module adds to the binding, and why:
 * - Mount options the binding does not pass through (`use_ino` for stable
 *   inode numbers, `ro`, `negative_timeout`, `max_readahead`): the binding's
 *   option builder (`_fuseOptions`) is replaced with ours.
 * - The binding's per-op timeout (15 s by default, answered with
 *   ETIMEDOUT) is off unless asked for: a slow chunk fetch must never
 *   surface as ETIMEDOUT. It also saves a timer per op.
 * - getxattr/listxattr answer ERANGE when the caller's buffer is too small
 *   (the binding would truncate and report the full length).
 * - The kernel's readahead window for the mount (sysfs `read_ahead_kb`).
 * - Unmount falls back to `umount -l` when `fusermount -uz` fails.
 *
 * The ops contract is the binding's: path-based ops, callbacks take 0 or a
 * NEGATIVE errno (from `os.constants.errno`), read's callback takes the byte
 * count. Callers never see the binding's class.
 *
 * May import: src/errors.ts, node built-ins, the binding.
 */
import { execFile } from 'node:child_process'
import { createRequire } from 'node:module'
import { constants as osConstants } from 'node:os'
import { readFile, stat, writeFile } from 'node:fs/promises'
import { promisify } from 'node:util'
import { UnsupportedError, UsageError, describeError } from '../errors.js'

const BINDING_MODULE = 'fuse-native'
const execFileAsync = promisify(execFile)
const { ERANGE } = osConstants.errno
/** libfuse 2 sends at most 128 KiB per read request. */
const LIBFUSE2_MAX_READ = 128 * 1024

/** Attributes for getattr/readdir. Times in milliseconds since the epoch (the binding keeps ms precision, and cannot carry negative times). */
export interface FuseStat {
  mode: number
  uid: number
  gid: number
  size: number
  nlink: number
  ino: number
  rdev: number
  blksize: number
  blocks: number
  atime: number
  mtime: number
  ctime: number
}

/** statvfs fields; each must fit in 32 bits (the binding's wire format). */
export interface FuseStatfs {
  bsize: number
  frsize: number
  blocks: number
  bfree: number
  bavail: number
  files: number
  ffree: number
  favail: number
  fsid: number
  flag: number
  namemax: number
}

/** 0 or a negative errno. */
export type FuseErrCallback = (err: number) => void
export type FuseValueCallback<T> = (err: number, value?: T) => void

/**
 * The binding's path-based ops table (the subset layerd implements). Every
 * callback must be called exactly once, with numbers: the binding throws on
 * anything else.
 */
export interface FuseOperations {
  init?: (cb: FuseErrCallback) => void
  getattr: (path: string, cb: FuseValueCallback<FuseStat>) => void
  readdir: (path: string, cb: (err: number, names?: string[], stats?: FuseStat[]) => void) => void
  readlink: (path: string, cb: FuseValueCallback<string>) => void
  access: (path: string, mode: number, cb: FuseErrCallback) => void
  statfs: (path: string, cb: FuseValueCallback<FuseStatfs>) => void
  open?: (path: string, flags: number, cb: FuseValueCallback<number>) => void
  opendir?: (path: string, flags: number, cb: FuseValueCallback<number>) => void
  /** `cb(bytesRead)` or `cb(-errno)`. `buf` is only valid until cb is called. */
  read: (path: string, fd: number, buf: Buffer, length: number, position: number, cb: (result: number) => void) => void
  release?: (path: string, fd: number, cb: FuseErrCallback) => void
  releasedir?: (path: string, fd: number, cb: FuseErrCallback) => void
  /**
   * `cb(0, value)`; `cb(0, undefined)` means no such attribute (ENODATA).
   * Leave getxattr/listxattr out for a filesystem without xattrs: the kernel
   * then stops asking (one ENOSYS), which saves two round trips per file on
   * `ls -l` (security.selinux, system.posix_acl_access).
   */
  getxattr?: (path: string, name: string, position: number, cb: FuseValueCallback<Buffer>) => void
  listxattr?: (path: string, cb: FuseValueCallback<string[]>) => void
  // Write-type ops: layerd answers EROFS to all of them.
  write: (path: string, fd: number, buf: Buffer, length: number, position: number, cb: (result: number) => void) => void
  create: (path: string, mode: number, cb: FuseValueCallback<number>) => void
  truncate: (path: string, size: number, cb: FuseErrCallback) => void
  ftruncate: (path: string, fd: number, size: number, cb: FuseErrCallback) => void
  unlink: (path: string, cb: FuseErrCallback) => void
  rename: (src: string, dest: string, cb: FuseErrCallback) => void
  link: (src: string, dest: string, cb: FuseErrCallback) => void
  symlink: (target: string, path: string, cb: FuseErrCallback) => void
  mkdir: (path: string, mode: number, cb: FuseErrCallback) => void
  rmdir: (path: string, cb: FuseErrCallback) => void
  chmod: (path: string, mode: number, cb: FuseErrCallback) => void
  chown: (path: string, uid: number, gid: number, cb: FuseErrCallback) => void
  utimens: (path: string, atime: number, mtime: number, cb: FuseErrCallback) => void
  mknod: (path: string, mode: number, dev: number, cb: FuseErrCallback) => void
  setxattr: (path: string, name: string, value: Buffer, position: number, flags: number, cb: FuseErrCallback) => void
  removexattr: (path: string, name: string, cb: FuseErrCallback) => void
}

export interface FuseMountOptions {
  /** Shown as the source in /proc/mounts; also the mount subtype (`fuse.<fsName>`). No commas. */
  fsName: string
  /** Kernel-level read-only mount (`ro`): the VFS refuses writes before they reach the ops. */
  readOnly: boolean
  /** Let other uids use the mount (containers run as other users). */
  allowOther: boolean
  /** The kernel checks permissions from getattr's mode/uid/gid. */
  defaultPermissions: boolean
  /** Keep the page cache across opens (`kernel_cache`); only for content that never changes. */
  kernelCache: boolean
  /** Seconds the kernel may cache names, attributes, and failed lookups. */
  entryTimeoutS: number
  attrTimeoutS: number
  negativeTimeoutS: number
  /** Largest read request, bytes (fuse-native: at most libfuse 2's 128 KiB). */
  maxReadBytes: number
  /** Kernel readahead window for this mount, KiB; undefined keeps the kernel default. */
  readAheadKiB?: number
  /**
   * The binding's per-op timeout, after which it answers ETIMEDOUT. Off by
   * default (undefined). Tests turn it on to show that reads are exempt:
   * `readMs` defaults to off even when `defaultMs` is set.
   */
  opTimeout?: { defaultMs: number, readMs?: number }
  /** libfuse debug output on stderr. */
  debug?: boolean
  /**
   * Who serves the mount: 'kernel' (native/fuse_server.c, kernel-fuse.ts)
   * or 'fuse-native' (this module). Default: 'kernel' where it can
   * (kernelFuseUnavailable), else 'fuse-native'; the setting LAYERD_FUSE_BACKEND
   * overrides the default.
   */
  backend?: FuseBackend
  /**
   * Kernel backend only: offer FUSE passthrough (Linux 6.9+), so files given
   * a backing file (src/fs/passthrough-files.ts) are read by the kernel from
   * it. fuse-native ignores it.
   */
  passthrough?: boolean
}

export type FuseBackend = 'kernel' | 'fuse-native'

/** A live mount. */
export interface FuseMount {
  readonly mountpoint: string
  /** Detach the mount (lazily: open files keep working until closed). Idempotent. Throws UnsupportedError when no unmount tool works. */
  unmount: () => Promise<void>
}

interface BindingInstance {
  opts: Record<string, unknown>
  mnt: string
  ops: FuseOperations
  _fuseOptions: () => string
  mount: (cb: (err: Error | null) => void) => void
  unmount: (cb: (err: Error | null) => void) => void
}
type BindingClass = new (mnt: string, ops: object, opts: object) => BindingInstance

let bindingClass: BindingClass | undefined

/** Load the binding once and subclass it. Throws UnsupportedError if it cannot load (libfuse.so.2 missing). */
function loadBinding (): BindingClass {
  if (bindingClass !== undefined) return bindingClass
  let Base: BindingClass
  try {
    Base = createRequire(import.meta.url)(BINDING_MODULE) as BindingClass
  } catch (err) {
    throw new UnsupportedError(`cannot load the FUSE binding ${BINDING_MODULE} (is libfuse2 installed?): ${describeError(err)}`, { cause: err })
  }
  class LayerdFuse extends (Base as any) {
    _fuseOptions (this: BindingInstance): string {
      return '-o' + (this.opts.layerdOptions as string)
    }

    /** As the binding's, but ERANGE when the value does not fit the caller's buffer. */
    _op_getxattr (this: BindingInstance, signal: (res: number, buf: ArrayBuffer) => void, path: string, name: string, valueBuf: Buffer, position: number): void {
      this.ops.getxattr!(path, name, position, (err, value) => {
        if (err !== 0) return signal(err, valueBuf.buffer as ArrayBuffer)
        if (value === undefined) return signal(-osConstants.errno.ENODATA, valueBuf.buffer as ArrayBuffer)
        if (valueBuf.length === 0) return signal(value.length, valueBuf.buffer as ArrayBuffer)
        if (value.length > valueBuf.length) return signal(-ERANGE, valueBuf.buffer as ArrayBuffer)
        value.copy(valueBuf)
        signal(value.length, valueBuf.buffer as ArrayBuffer)
      })
    }

    /** As the binding's, but ERANGE when the list does not fit, and no macOS padding. */
    _op_listxattr (this: BindingInstance, signal: (res: number, buf: ArrayBuffer) => void, path: string, listBuf: Buffer): void {
      this.ops.listxattr!(path, (err, list) => {
        if (err !== 0 || list === undefined) return signal(err !== 0 ? err : -osConstants.errno.EIO, listBuf.buffer as ArrayBuffer)
        let size = 0
        for (const name of list) size += Buffer.byteLength(name) + 1
        if (listBuf.length === 0) return signal(size, listBuf.buffer as ArrayBuffer)
        if (size > listBuf.length) return signal(-ERANGE, listBuf.buffer as ArrayBuffer)
        let at = 0
        for (const name of list) {
          at += listBuf.write(name, at)
          listBuf[at++] = 0
        }
        signal(at, listBuf.buffer as ArrayBuffer)
      })
    }
  }
  bindingClass = LayerdFuse as unknown as BindingClass
  return bindingClass
}

/** Throws UsageError unless `name` can be a FUSE fsname and subtype (no commas or spaces in mount options). */
export function checkFsName (name: string): void {
  if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new UsageError(`FUSE fsName ${JSON.stringify(name)} must be letters, digits, '.', '_' or '-'`)
}

/** The `-o` option string for libfuse 2 (fuse_mount and fuse_new parse the same list). */
export function fuseOptionString (o: FuseMountOptions): string {
  checkFsName(o.fsName)
  const opts = [
    `fsname=${o.fsName}`, `subtype=${o.fsName}`,
    'use_ino', // st_ino from getattr, not libfuse's own node ids: stable numbers, hardlinks share one
    `entry_timeout=${o.entryTimeoutS}`, `attr_timeout=${o.attrTimeoutS}`, `negative_timeout=${o.negativeTimeoutS}`,
    `max_read=${Math.min(o.maxReadBytes, LIBFUSE2_MAX_READ)}`, `max_readahead=${Math.max(Math.min(o.maxReadBytes, LIBFUSE2_MAX_READ), (o.readAheadKiB ?? 0) * 1024)}`
  ]
  if (o.readOnly) opts.push('ro')
  if (o.allowOther) opts.push('allow_other')
  if (o.defaultPermissions) opts.push('default_permissions')
  if (o.kernelCache) opts.push('kernel_cache')
  if (o.debug === true) opts.push('debug')
  return opts.join(',')
}

/**
 * Mount `ops` at `mountpoint` (an existing, empty, unmounted directory).
 * Async; resolves once the kernel has sent INIT, so the mount is usable.
 * Rejects with UnsupportedError when the binding cannot load, UsageError
 * when the mountpoint is unusable (the binding's message included).
 */
export async function mountFuse (mountpoint: string, ops: FuseOperations, options: FuseMountOptions): Promise<FuseMount> {
  const Fuse = loadBinding()
  const timeout = options.opTimeout === undefined
    ? false
    : { default: options.opTimeout.defaultMs, read: options.opTimeout.readMs ?? false }
  const fuse = new Fuse(mountpoint, ops, { timeout, layerdOptions: fuseOptionString(options) })
  // The binding's handles do not hold the event loop; this timer does, until the kernel's INIT arrives.
  const keepAlive = setInterval(() => {}, 60_000)
  try {
    await new Promise<void>((resolve, reject) => {
      fuse.mount(err => {
        if (err === null || err === undefined) resolve()
        else reject(new UsageError(`cannot mount FUSE at ${mountpoint}: ${describeError(err)}`, { cause: err }))
      })
    })
  } finally {
    clearInterval(keepAlive)
  }
  if (options.readAheadKiB !== undefined) await setReadAhead(mountpoint, options.readAheadKiB)
  let unmounting: Promise<void> | undefined
  return {
    mountpoint: fuse.mnt,
    unmount: async () => {
      unmounting ??= unmountBinding(fuse)
      return await unmounting
    }
  }
}

async function unmountBinding (fuse: BindingInstance): Promise<void> {
  const failure = await new Promise<Error | null>(resolve => fuse.unmount(err => resolve(err ?? null)))
  if (failure === null) return
  await lazyUnmount(fuse.mnt, failure)
}

/**
 * Detach whatever is mounted at `mountpoint`, lazily (`fusermount -uz`,
 * then `umount -l`). Async. Nothing mounted there is not an error. Throws
 * UnsupportedError naming both failures when neither works.
 */
export async function lazyUnmount (mountpoint: string, earlier?: Error): Promise<void> {
  const failures: string[] = earlier === undefined ? [] : [describeError(earlier)]
  for (const [cmd, args] of [['fusermount', ['-uz', mountpoint]], ['umount', ['-l', mountpoint]]] as const) {
    try {
      await execFileAsync(cmd, [...args])
      return
    } catch (err) {
      failures.push(`${cmd}: ${describeError(err).trim()}`)
    }
  }
  if (await mountedFsType(mountpoint) === undefined) return
  throw new UnsupportedError(`cannot unmount ${mountpoint}: ${failures.join('; ')}`)
}

/**
 * The type (`fuse.layerd`, `overlay`…) of the filesystem mounted exactly at
 * `path` (the topmost one), or undefined. Async; reads /proc/self/mountinfo,
 * so `path` must be absolute and canonical.
 */
export async function mountedFsType (path: string): Promise<string | undefined> {
  const table = await readFile('/proc/self/mountinfo', 'utf8')
  let found: string | undefined
  for (const line of table.split('\n')) {
    const fields = line.split(' ')
    if (fields.length < 10 || unescapeMountPath(fields[4]!) !== path) continue
    const dash = fields.indexOf('-', 6)
    if (dash > 0) found = fields[dash + 1]
  }
  return found
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMountPath (s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)))
}

/**
 * Set the kernel readahead window of the FUSE mount at `mountpoint` through
 * its backing device's sysfs entry. Best effort: a read-only sysfs leaves the
 * kernel default (128 KiB), which only costs throughput.
 */
export async function setReadAhead (mountpoint: string, kib: number): Promise<void> {
  try {
    const dev = (await stat(mountpoint)).dev
    const major = Math.floor(dev / 256) & 0xfff
    const minor = (dev & 0xff) | ((Math.floor(dev / 4096)) & 0xfff00)
    await writeFile(`/sys/class/bdi/${major}:${minor}/read_ahead_kb`, String(kib))
  } catch {
    // Leave the default; see the doc comment.
  }
}
