/**
 * Files of one sandbox, reached from the host without ever leaving its root.
 * Every path is opened with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
 * against a directory fd of the sandbox's merged root (src/native.ts): `..`,
 * absolute paths and symlinks the sandbox planted (`/tmp/x -> /`) resolve as
 * inside the sandbox, and `/proc/<pid>/root` links are refused. Calls that
 * act on a name (lstat, mkdir, rename, rm) act on it through
 * `/proc/self/fd/<parent fd>/<name>`: the parent was opened in the root,
 * and a single final name is not followed by those calls.
 *
 * A relative path is relative to the image's working directory. What is
 * left: a recursive remove walks the tree with Node's rm, which does not
 * follow symlinks but could be raced by a sandbox process swapping a
 * directory it is walking for a link; the swap is seen at the next lstat
 * and the link itself is removed, not its target.
 *
 * May import: src/errors.ts, src/host/ (src/native.ts), node built-ins.
 */
import { closeSync, constants, fstatSync, openSync } from 'node:fs'
import { lstat, mkdir, readdir, readlink, rename, rm } from 'node:fs/promises'
import type { Stats } from 'node:fs'
import { posix } from 'node:path'
import { BadInputError } from '../errors.js'
import { openInRoot } from '../native.js'

const O_PATH = 0o10000000
/** Entries returned by one list call, at most (a sandbox can make millions). */
export const MAX_LIST_ENTRIES = 100_000

export interface EntryInfo {
  name: string
  type: 'FILE_TYPE_FILE' | 'FILE_TYPE_DIRECTORY' | 'FILE_TYPE_SYMLINK'
  path: string
  size: string
  mode: number
  permissions: string
  owner: string
  group: string
  modifiedTime: string
  symlinkTarget?: string
}

function permissionString (st: Stats): string {
  const kind = st.isDirectory() ? 'd' : st.isSymbolicLink() ? 'l' : '-'
  const bits = 'rwxrwxrwx'
  let out = kind
  for (let i = 0; i < 9; i++) out += (st.mode & (0o400 >> i)) !== 0 ? bits[i] : '-'
  return out
}

export class SandboxFiles {
  readonly #rootFd: number
  #closed = false

  /** Open the merged root. Sync; throws errno errors. */
  constructor (merged: string, private readonly workdir: string) {
    this.#rootFd = openSync(merged, constants.O_RDONLY | constants.O_DIRECTORY)
  }

  close (): void {
    if (this.#closed) return
    this.#closed = true
    closeSync(this.#rootFd)
  }

  /** `path` as an absolute, normalised sandbox path. Sync; throws BadInputError. */
  absolute (path: unknown): string {
    if (typeof path !== 'string' || path === '') throw new BadInputError('path must be a non-empty string')
    if (path.includes('\0')) throw new BadInputError('path contains a NUL byte')
    return posix.normalize(posix.isAbsolute(path) ? path : posix.join(this.workdir, path))
  }

  #open (path: string, flags: number, mode = 0): number {
    if (this.#closed) throw new BadInputError('the sandbox is gone')
    return openInRoot(this.#rootFd, path, flags, mode)
  }

  /** Run `fn` with the host path of `path`'s final name under its parent, opened in the root. Async. */
  async #atName<T> (path: string, fn: (hostPath: string, name: string) => Promise<T>): Promise<T> {
    const name = posix.basename(path)
    if (path === '/' || name === '' || name === '..') throw new BadInputError(`${path}: names the sandbox root, not an entry in it`)
    const parent = this.#open(posix.dirname(path), O_PATH | constants.O_DIRECTORY)
    try { return await fn(`/proc/self/fd/${parent}/${name}`, name) } finally { closeSync(parent) }
  }

  async #info (hostPath: string, sandboxPath: string, st?: Stats): Promise<EntryInfo> {
    const s = st ?? await lstat(hostPath)
    const info: EntryInfo = {
      name: sandboxPath === '/' ? '/' : posix.basename(sandboxPath),
      type: s.isDirectory() ? 'FILE_TYPE_DIRECTORY' : s.isSymbolicLink() ? 'FILE_TYPE_SYMLINK' : 'FILE_TYPE_FILE',
      path: sandboxPath,
      size: String(s.size),
      mode: s.mode & 0o7777,
      permissions: permissionString(s),
      owner: String(s.uid),
      group: String(s.gid),
      modifiedTime: s.mtime.toISOString()
    }
    if (s.isSymbolicLink()) info.symlinkTarget = await readlink(hostPath).catch(() => '')
    return info
  }

  /** The entry at `path`, a final symlink not followed. Async; ENOENT when absent. */
  async stat (path: unknown): Promise<EntryInfo> {
    const p = this.absolute(path)
    if (p === '/') return await this.#info(`/proc/self/fd/${this.#rootFd}`, '/', fstatSync(this.#rootFd))
    return await this.#atName(p, async host => await this.#info(host, p))
  }

  /** Entries under the directory `path`, `depth` levels down (1: its children). Async. */
  async list (path: unknown, depth: number): Promise<EntryInfo[]> {
    const p = this.absolute(path)
    const out: EntryInfo[] = []
    const walk = async (dir: string, level: number): Promise<void> => {
      const fd = this.#open(dir, constants.O_RDONLY | constants.O_DIRECTORY)
      try {
        const names = await readdir(`/proc/self/fd/${fd}`)
        for (const name of names.sort()) {
          if (out.length >= MAX_LIST_ENTRIES) throw new BadInputError(`${p}: more than ${MAX_LIST_ENTRIES} entries; list a smaller tree`)
          const child = posix.join(dir, name)
          const info = await this.#info(`/proc/self/fd/${fd}/${name}`, child).catch(() => undefined) // removed meanwhile
          if (info === undefined) continue
          out.push(info)
          if (level < depth && info.type === 'FILE_TYPE_DIRECTORY') await walk(child, level + 1)
        }
      } finally { closeSync(fd) }
    }
    await walk(p, 1)
    return out
  }

  /** mkdir -p. Async; resolves false when the directory already existed. Throws EEXIST/ENOTDIR for a non-directory in the way. */
  async makeDir (path: unknown): Promise<boolean> {
    const p = this.absolute(path)
    const parts = p.split('/').filter(c => c !== '')
    let made = false
    for (let i = 1; i <= parts.length; i++) {
      const at = '/' + parts.slice(0, i).join('/')
      let fd: number | undefined
      try { fd = this.#open(at, O_PATH | constants.O_DIRECTORY) } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      }
      if (fd !== undefined) { closeSync(fd); continue }
      await this.#atName(at, async host => { await mkdir(host, { mode: 0o755 }) })
      made = true
    }
    return made
  }

  /** rename(2) from one sandbox path to another. Async. */
  async move (source: unknown, destination: unknown): Promise<EntryInfo> {
    const from = this.absolute(source)
    const to = this.absolute(destination)
    await this.#atName(from, async src => { await this.#atName(to, async dst => { await rename(src, dst) }) })
    return await this.stat(to)
  }

  /** Remove a file, link or directory tree. Async; ENOENT when absent. */
  async remove (path: unknown): Promise<void> {
    const p = this.absolute(path)
    await this.#atName(p, async host => {
      await lstat(host)
      await rm(host, { recursive: true })
    })
  }

  /** A regular file opened for reading (the fd is the caller's to close), and its size. Async; EISDIR for a directory. */
  openRead (path: unknown): { fd: number, size: number } {
    const fd = this.#open(this.absolute(path), constants.O_RDONLY)
    return { fd, size: regularSize(fd) }
  }

  /** A file created or truncated for writing (its parents made; the fd is the caller's to close). Async. */
  async openWrite (path: unknown): Promise<{ fd: number, path: string }> {
    const p = this.absolute(path)
    if (p === '/') throw new BadInputError('cannot write to the sandbox root')
    await this.makeDir(posix.dirname(p))
    const fd = this.#open(p, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC, 0o644)
    regularSize(fd)
    return { fd, path: p }
  }
}

/** The size of the regular file open as `fd`; closes it and throws EISDIR when it is not one. Sync. */
function regularSize (fd: number): number {
  let st: Stats
  try { st = fstatSync(fd) } catch (err) { closeSync(fd); throw err }
  if (st.isFile()) return st.size
  closeSync(fd)
  throw Object.assign(new Error(`not a regular file (${st.isDirectory() ? 'a directory' : 'a special file'})`), { code: 'EISDIR' })
}
