/**
 * Typed loader for layerd's native addon (native/layerd_native.c): the few
 * system calls Node lacks — extended attributes that do not follow symlinks,
 * and mknod for device nodes and fifos.
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

interface NativeBinding {
  version (): number
  llistxattr (path: string): string[]
  lgetxattr (path: string, name: string): Buffer
  lsetxattr (path: string, name: string, value: Uint8Array, flags: number): void
  mknod (path: string, mode: number, major: number, minor: number): void
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

/** Addon interface version (2: xattrs and mknod). Sync. */
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
