/**
 * Typed loader for layerd's native addon (native/layerd_native.c): the few
 * system calls Node lacks — extended attributes that do not follow symlinks,
 * and mknod for device nodes and fifos — FastCDC's cut search for push
 * (native/fastcdc.c), and a FUSE server that speaks the kernel protocol
 * (native/fuse_server.c, used by src/fs/kernel-fuse.ts).
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

interface NativeBinding extends Partial<NativeFuseServerBinding> {
  version (): number
  llistxattr (path: string): string[]
  lgetxattr (path: string, name: string): Buffer
  lsetxattr (path: string, name: string, value: Uint8Array, flags: number): void
  mknod (path: string, mode: number, major: number, minor: number): void
  mount? (source: string, target: string, fstype: string, flags: number, data: string): void
  umount2? (target: string, flags: number): void
  mountLoop? (file: string, target: string, fstype: string, flags: number, data: string): void
  mountAt? (cwd: string, source: string, target: string, fstype: string, flags: number, data: string): void
  fastcdcNext? (data: Uint8Array, from: number, state: Int32Array, params: Int32Array, gear: Int32Array): number
  flock? (fd: number, operation: number): boolean
}

/** An opaque handle to a running kernel-protocol FUSE server (native/fuse_server.c). */
export type NativeFuseServer = object & { readonly __brand: 'NativeFuseServer' }

export interface NativeFuseServerOptions { entryValidS: number, attrValidS: number, negativeValidS: number, maxPages: number, maxReadahead: number }

/** The FUSE server of the addon; src/fs/kernel-fuse.ts is its only user. */
export interface NativeFuseServerBinding {
  /** Mount (mount(2), read-only, nosuid, nodev) and start serving `table`. `onEvent(kind, unique, nodeid, offset, size)`: 1 INIT answered, 2 READ, 3 connection ended. Throws Error with the errno name as `code`. */
  fuseServerMount (mountpoint: string, fsName: string, mountOptions: string, options: NativeFuseServerOptions, table: Buffer,
    onEvent: (kind: number, unique: number, nodeid: number, offset: number, size: number) => void): NativeFuseServer
  fuseServerReply (server: NativeFuseServer, unique: number, data: Buffer, length: number): void
  /** `errno` positive. */
  fuseServerReplyError (server: NativeFuseServer, unique: number, errno: number): void
  fuseServerCounters (server: NativeFuseServer): { requests: number, lookups: number, readdirs: number, opens: number, reads: number, repliesFailed: number }
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
  if (b.fuseServerMount === undefined) throw new UnsupportedError('layerd native addon has no FUSE server (built before version 3): run `npm run build`')
  return b as NativeFuseServerBinding
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
  /** `mount -o loop`: `file` on a self-clearing loop device, mounted at `target`. Throws errno errors. */
  mountLoop: (file: string, target: string, fstype: string, flags: number, data: string) => void
  /** mount(2) with `target` and paths in `data` relative to `cwd` (the mount table then shows them relative). Throws errno errors. */
  mountAt: (cwd: string, source: string, target: string, fstype: string, flags: number, data: string) => void
}

/** The addon's mount calls. Sync; throws UnsupportedError when the addon is missing or older than version 3. */
export function nativeMounts (): NativeMounts {
  const b = load()
  if (b.mount === undefined || b.umount2 === undefined || b.mountLoop === undefined || b.mountAt === undefined) {
    throw new UnsupportedError('layerd native addon has no mount calls (built before version 3): run `npm run build`')
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

/** Addon interface version (2: xattrs and mknod; 3: the FUSE server, mount, umount2, loop devices; 4: FastCDC; 5: flock). Sync. */
export function nativeVersion (): number {
  return load().version()
}

/** Names of the extended attributes of `path`, not following a final symlink. Sync; throws errno errors. */
export function llistxattr (path: string): string[] {
  return load().llistxattr(path)
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
