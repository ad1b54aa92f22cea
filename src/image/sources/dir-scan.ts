/**
 * Directory scans for the directory walk: the native addon lists a
 * directory and reports each child's lstat fields, symlink target and
 * extended attributes in one call (native/dir_scan.c); this decodes its
 * records. A call that failed for one entry is kept on that entry as a
 * Node-style errno error, so the walk decides what it means.
 *
 * May import: src/native.ts, node built-ins.
 */
import { getSystemErrorMap } from 'node:util'
import { nativeDirScan } from '../../native.js'

export interface ScannedXattr { name: string, value?: Buffer, error?: NodeJS.ErrnoException }

export interface ScannedEntry {
  /** The name's bytes (a child's name; statPath: the path). */
  name: Buffer
  /** lstat failed: the other fields are zero. */
  statError?: NodeJS.ErrnoException
  /** st_mode with the file type bits. */
  mode: number
  uid: number
  gid: number
  /** mtime in whole seconds, rounded down. */
  mtime: number
  size: number
  nlink: number
  dev: bigint
  ino: bigint
  rdevMajor: number
  rdevMinor: number
  /** Symlinks: the target's bytes, or why readlink failed. */
  linkTarget?: Buffer
  linkError?: NodeJS.ErrnoException
  /** Extended attributes, in the order the file system lists them; `xattrError` when listing failed. */
  xattrs: ScannedXattr[]
  xattrError?: NodeJS.ErrnoException
}

/** The children of directory `path`, sorted by name bytes. Sync; throws errno errors when the directory cannot be listed. */
export function scanDir (path: string): ScannedEntry[] {
  const r = new RecordReader(nativeDirScan().scanDir(path), path)
  const count = r.u32()
  const out: ScannedEntry[] = []
  for (let i = 0; i < count; i++) out.push(r.record(`${path}/`))
  return out
}

/** `path` itself, not following a final symlink. Sync. */
export function statPath (path: string): ScannedEntry {
  return new RecordReader(nativeDirScan().statPath(path), path).record('')
}

let errorNames: Map<number, [string, string]> | undefined

function errnoError (errno: number, syscall: string, path: string): NodeJS.ErrnoException {
  const [code, text] = (errorNames ??= getSystemErrorMap()).get(-errno) ?? [`E${errno}`, `error ${errno}`]
  const err: NodeJS.ErrnoException = new Error(`${code}: ${text}, ${syscall} '${path}'`)
  err.code = code
  err.errno = -errno
  err.syscall = syscall
  err.path = path
  return err
}

class RecordReader {
  readonly #buf: Buffer
  readonly #view: DataView
  readonly #what: string
  #at = 0

  constructor (buf: Buffer, what: string) {
    this.#buf = buf
    this.#view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength)
    this.#what = what
  }

  u32 (): number {
    const v = this.#view.getUint32(this.#at, true)
    this.#at += 4
    return v
  }

  #u64 (): bigint {
    const v = this.#view.getBigUint64(this.#at, true)
    this.#at += 8
    return v
  }

  /** A u64 known to fit a double (sizes, link counts). */
  #u53 (): number {
    const lo = this.u32()
    return this.u32() * 2 ** 32 + lo
  }

  #i64 (): number {
    const lo = this.u32()
    return this.#view.getInt32((this.#at += 4) - 4, true) * 2 ** 32 + lo
  }

  #bytes (n: number): Buffer {
    if (this.#at + n > this.#buf.length) throw new Error(`internal: directory scan of ${this.#what} is truncated`)
    const b = this.#buf.subarray(this.#at, this.#at + n)
    this.#at += n
    return b
  }

  /** One record; `prefix` + name is the entry's path, for error messages. */
  record (prefix: string): ScannedEntry {
    const name = this.#bytes(this.u32())
    const path = prefix + name.toString('utf8')
    const statErrno = this.u32()
    const e: ScannedEntry = {
      name,
      mode: this.u32(),
      uid: this.u32(),
      gid: this.u32(),
      mtime: this.#i64(),
      size: this.#u53(),
      nlink: this.#u53(),
      dev: this.#u64(),
      ino: this.#u64(),
      rdevMajor: this.u32(),
      rdevMinor: this.u32(),
      xattrs: []
    }
    if (statErrno !== 0) e.statError = errnoError(statErrno, 'lstat', path)
    const linkErrno = this.u32()
    const link = this.#bytes(this.u32())
    if (linkErrno !== 0) e.linkError = errnoError(linkErrno, 'readlink', path)
    else if ((e.mode & 0o170000) === 0o120000) e.linkTarget = link
    const xattrErrno = this.u32()
    if (xattrErrno !== 0) e.xattrError = errnoError(xattrErrno, 'llistxattr', path)
    const count = this.u32()
    for (let i = 0; i < count; i++) {
      const xname = this.#bytes(this.u32()).toString('utf8')
      const valueErrno = this.u32()
      const value = this.#bytes(this.u32())
      e.xattrs.push(valueErrno === 0 ? { name: xname, value: Buffer.from(value) } : { name: xname, error: errnoError(valueErrno, 'lgetxattr', path) })
    }
    return e
  }
}
