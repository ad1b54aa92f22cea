/**
 * lstat for push's directory walk: the fields the walk needs as plain
 * numbers, and the entry's xattr names, from one native call per entry
 * (native/entry_stat.c).
 *
 * Node's BigInt lstat built some twenty BigInts and divisions per call, and
 * a separate llistxattr call asked the list's size before the list; on the
 * python tree (8,240 entries) the two were most of the walk's system-call
 * time and much of its garbage, on push's busiest thread. A Number lstat
 * would not do: its mtimeMs (sec * 1000 + nsec / 1e6 in doubles) cannot
 * always be floored to the right second. Here every value is exact: 64-bit
 * numbers arrive as 32-bit halves, and the mtime as st_mtim.tv_sec.
 *
 * May import: src/native.ts, node built-ins.
 */
import { constants } from 'node:fs'
import { getSystemErrorMap } from 'node:util'
import { lstatEntry } from '../../native.js'

export interface EntryStat {
  /** st_mode: file type and permission bits. */
  mode: number
  uid: number
  gid: number
  size: number
  nlink: number
  /** Modification time floored to whole seconds since the epoch (st_mtim.tv_sec). */
  mtime: number
  /** st_dev as `hi:lo` 32-bit halves (equal devices give equal strings). */
  dev: string
  /** `dev:ino`, set when nlink > 1 and the entry is not a directory (hardlink detection). */
  inodeKey?: string
  /** Major and minor of a character or block device. */
  rdev?: { major: number, minor: number }
  /** Names of its extended attributes; an Error when listing them failed (the walk decides what that means). */
  xattrNames: string[] | NodeJS.ErrnoException
  /** False when st_size does not fit a double exactly (above 2^53). */
  sizeExact: boolean
}

const { S_IFMT, S_IFDIR, S_IFCHR, S_IFBLK } = constants
/** One reused out array: the walk is synchronous and reads each result before the next call. */
const OUT = new Float64Array(14)

/** lstat `path` (never following a final symlink) and list its xattr names. Sync; throws Node-style errno errors (syscall 'lstat'). */
export function statEntry (path: string): EntryStat {
  const names = lstatEntry(path, OUT)
  const mode = OUT[0]!
  const nlink = OUT[4]!
  const type = mode & S_IFMT
  const dev = `${OUT[6]!}:${OUT[7]!}`
  const xattrErrno = OUT[12]!
  const st: EntryStat = {
    mode, uid: OUT[1]!, gid: OUT[2]!, size: OUT[3]!, nlink, mtime: OUT[5]!, dev,
    xattrNames: xattrErrno === 0 ? names : errnoError(xattrErrno, path),
    sizeExact: OUT[13] === 1
  }
  if (nlink > 1 && type !== S_IFDIR) st.inodeKey = `${dev}:${OUT[8]!}:${OUT[9]!}`
  if (type === S_IFCHR || type === S_IFBLK) st.rdev = { major: OUT[10]!, minor: OUT[11]! }
  return st
}

function errnoError (errno: number, path: string): NodeJS.ErrnoException {
  const [code, description] = getSystemErrorMap().get(-errno) ?? [`E${errno}`, 'unknown error']
  const err: NodeJS.ErrnoException = new Error(`${code}: ${description}, llistxattr '${path}'`)
  err.code = code
  err.errno = -errno
  err.syscall = 'llistxattr'
  err.path = path
  return err
}
