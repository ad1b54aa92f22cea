/**
 * Entry path policy, shared by every reader of untrusted trees.
 *
 * - A leading `/` is removed: absolute entry names become relative to the
 *   image root (what docker does). The caller is told, so it can warn.
 * - `.` components and repeated or trailing `/` are dropped.
 * - A `..` component anywhere is refused: it is never needed by a real image
 *   and is the classic way out of an extraction root.
 * - NUL bytes, components over 255 bytes and paths over 4096 bytes are refused.
 *
 * The normalized form has no leading or trailing `/`; the root is ''.
 *
 * Pure: no fs, network or native code.
 */

export const MAX_PATH_BYTES = 4096
export const MAX_NAME_BYTES = 255

export type PathVerdict =
  | { ok: true, path: string, wasAbsolute: boolean }
  | { ok: false, reason: string }

export function normalizeEntryPath (name: string): PathVerdict {
  if (name.includes('\0')) return { ok: false, reason: 'contains a NUL byte' }
  const wasAbsolute = name.startsWith('/')
  const parts: string[] = []
  for (const part of name.split('/')) {
    if (part === '' || part === '.') continue
    if (part === '..') return { ok: false, reason: "contains a '..' component" }
    if (Buffer.byteLength(part) > MAX_NAME_BYTES) return { ok: false, reason: `has a component longer than ${MAX_NAME_BYTES} bytes` }
    parts.push(part)
  }
  const path = parts.join('/')
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) return { ok: false, reason: `is longer than ${MAX_PATH_BYTES} bytes` }
  return { ok: true, path, wasAbsolute }
}

/** True for a path already in normalized form (what a valid TOC holds). */
export function isNormalizedPath (p: string): boolean {
  if (p === '') return true
  const v = normalizeEntryPath(p)
  return v.ok && !v.wasAbsolute && v.path === p
}

/** Parent of a normalized path; the root's parent is undefined. */
export function parentPath (p: string): string | undefined {
  if (p === '') return undefined
  const i = p.lastIndexOf('/')
  return i === -1 ? '' : p.slice(0, i)
}

export function baseName (p: string): string {
  return p.slice(p.lastIndexOf('/') + 1)
}

export function joinPath (dir: string, name: string): string {
  return dir === '' ? name : `${dir}/${name}`
}

/**
 * Does a relative symlink target, read from the link's directory, climb above
 * the root? Absolute targets never escape: they are resolved against the
 * image root, the way a chroot resolves them.
 */
export function symlinkEscapesRoot (linkPath: string, target: string): boolean {
  if (target.startsWith('/')) return false
  let depth = linkPath === '' ? 0 : linkPath.split('/').length - 1
  for (const part of target.split('/')) {
    if (part === '' || part === '.') continue
    if (part === '..') { depth--; if (depth < 0) return true } else depth++
  }
  return false
}
