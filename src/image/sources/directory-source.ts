/**
 * A directory tree as a one-layer image, read by walking it: lstat (never
 * following symlinks), readlink, xattrs, device numbers from rdev (all from
 * one native scan per directory, dir-scan.ts), hardlinks detected by (dev, ino) when nlink > 1 (later
 * paths become `hardlink` entries naming the first). Order is deterministic:
 * names sorted by their UTF-8 bytes, parents before children.
 *
 * Sockets are skipped and mount points inside the tree are recorded as empty
 * directories, each with a warning (see ingest-policy.ts). File content is
 * streamed, and each file entry also names its path (LayerEntry.file) so
 * push can read it on a worker thread; a file that changes size while it is
 * read is refused either way (exact-file.ts).
 *
 * The walk is synchronous. A tree is thousands of small files, and each
 * awaited fs call is a round trip through libuv's thread pool that the next
 * call waits for: on the python image (8,270 entries) the awaited walk made
 * a directory push take 2.1x as long as pushing the same image as a tar
 * (bench/push-throughput.ts). One native scan per directory, instead of
 * Node's lstat (a BigInt stat object), llistxattr and readlink per entry,
 * halves what is left of the walk on push's busiest thread. The calls are
 * cheap on a page-cached tree and the walk yields to the event loop every
 * YIELD_EVERY_ENTRIES entries, so worker results and uploads keep moving.
 * Push runs in layerctl and in commit, never inside layerd, so no FUSE
 * request waits behind a walk.
 *
 * May import: src/errors.ts, src/format/, the modules next to it.
 */
import { constants } from 'node:fs'
import { BadInputError, UnsupportedError, UsageError } from '../../errors.js'
import type { Digest } from '../../format/digest.js'
import { joinPath } from '../../format/paths.js'
import { scanDir, statPath, type ScannedEntry } from './dir-scan.js'
import { ZERO_DIFF_ID, type ImageSource, type LayerEntry, type LayerSource } from './image-source.js'
import { ExactFile } from './exact-file.js'
import { LayerPolicy, type IngestContext, type RawEntry } from './ingest-policy.js'
import { minimalConfig } from './rootfs-tar-source.js'

const READ_CHUNK_BYTES = 1024 * 1024
const YIELD_EVERY_ENTRIES = 256
const UTF8 = new TextDecoder('utf-8', { fatal: true })
const { S_IFMT, S_IFDIR, S_IFREG, S_IFLNK, S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK } = constants

/** A one-layer image of the directory at `path`. Sync; nothing is read until the layer's entries are. */
export function openDirectory (path: string, ctx: IngestContext): ImageSource {
  const layer = new DirectoryLayerSource(path, ctx)
  return { kind: 'directory', name: path, config: minimalConfig([ZERO_DIFF_ID]), layers: [layer], close: async () => {} }
}

export class DirectoryLayerSource implements LayerSource {
  readonly name: string
  readonly #root: string
  readonly #ctx: IngestContext
  #started = false

  constructor (root: string, ctx: IngestContext) {
    this.#root = root
    this.#ctx = ctx
    this.name = `directory ${root}, layer 1 of 1`
  }

  /** Always ZERO_DIFF_ID: a directory has no tar to digest. */
  diffId (): Digest {
    return ZERO_DIFF_ID
  }

  /** See {@link LayerSource.entries}. An entry's unread content is simply not read. */
  async * entries (): AsyncGenerator<LayerEntry> {
    if (this.#started) throw new UsageError(`${this.name}: entries() can be read only once`)
    this.#started = true
    const policy = new LayerPolicy(this.name, this.#ctx)
    const firstPaths = new Map<string, string>()
    let readBuffer: Buffer | undefined
    const rootStat = this.#stat(statPath(this.#root), '')
    if ((rootStat.mode & S_IFMT) !== S_IFDIR) throw new BadInputError(`${this.name}: not a directory`)
    const stack: Array<{ abs: string, rel: string, st: ScannedEntry }> = [{ abs: this.#root, rel: '', st: rootStat }]
    let walked = 0
    while (stack.length > 0) {
      if (++walked % YIELD_EVERY_ENTRIES === 0) await new Promise(resolve => setImmediate(resolve))
      const { abs, rel, st } = stack.pop()!
      const raw = this.#rawEntry(rel, st, firstPaths)
      if (raw === undefined) continue
      const header = policy.admit(raw)
      if (header === undefined) continue
      if (header.type === 'file') {
        const label = `${this.name}: ${JSON.stringify(rel)}`
        yield { header, body: readFile(abs, header.size, label, readBuffer ??= Buffer.allocUnsafeSlow(READ_CHUNK_BYTES)), file: { path: abs, label } }
      } else yield { header }
      if (raw.type !== 'dir') continue
      if (st.dev !== rootStat.dev) {
        this.#ctx.notice(`${this.name}: ${JSON.stringify(rel)} is a mount point; recorded as an empty directory`)
        continue
      }
      const children = this.#children(abs, rel)
      // Pushed in reverse so they pop in sorted order, each subtree before the next sibling.
      for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]!)
    }
  }

  /** The children of `abs`, sorted by name bytes, each with its scan (native/dir_scan.c: one call per directory). */
  #children (abs: string, rel: string): Array<{ abs: string, rel: string, st: ScannedEntry }> {
    let scanned: ScannedEntry[]
    try { scanned = scanDir(abs) } catch (err) {
      if (err instanceof UnsupportedError) throw err
      throw new BadInputError(`${this.name}: cannot list ${JSON.stringify(rel)}: ${(err as Error).message}`, { cause: err })
    }
    return scanned.map(st => {
      let name: string
      try { name = UTF8.decode(st.name) } catch {
        throw new BadInputError(`${this.name}: ${JSON.stringify(rel)} holds a name that is not valid UTF-8 (${st.name.toString('hex')})`)
      }
      const childRel = joinPath(rel, name)
      return { abs: `${abs}/${name}`, rel: childRel, st: this.#stat(st, childRel) }
    })
  }

  #rawEntry (rel: string, st: ScannedEntry, firstPaths: Map<string, string>): RawEntry | undefined {
    const base = { name: rel, mode: st.mode & 0o7777, uid: st.uid, gid: st.gid, mtime: st.mtime, size: 0 }
    const type = st.mode & S_IFMT
    if (type === S_IFSOCK) {
      this.#ctx.notice(`${this.name}: ${JSON.stringify(rel)} is a socket; skipped`)
      return undefined
    }
    if (type !== S_IFDIR && st.nlink > 1) {
      const key = `${st.dev}:${st.ino}`
      const first = firstPaths.get(key)
      // The inode's xattrs travel with the first path, as in a tar.
      if (first !== undefined) return { ...base, type: 'hardlink', linkname: first }
      firstPaths.set(key, rel)
    }
    const xattrs = this.#xattrs(rel, st)
    const withXattrs = (e: RawEntry): RawEntry => (xattrs !== undefined ? { ...e, xattrs } : e)
    switch (type) {
      case S_IFDIR: return withXattrs({ ...base, type: 'dir' })
      case S_IFREG: return withXattrs({ ...base, type: 'file', size: st.size })
      case S_IFLNK: {
        let target: string
        try {
          if (st.linkError !== undefined) throw st.linkError
          target = UTF8.decode(st.linkTarget)
        } catch (err) {
          throw new BadInputError(`${this.name}: cannot read symlink ${JSON.stringify(rel)}: ${(err as Error).message}`, { cause: err })
        }
        return withXattrs({ ...base, type: 'symlink', linkname: target })
      }
      case S_IFIFO: return withXattrs({ ...base, type: 'fifo' })
      case S_IFCHR: case S_IFBLK:
        return withXattrs({ ...base, type: type === S_IFCHR ? 'char' : 'block', devMajor: st.rdevMajor, devMinor: st.rdevMinor })
    }
    throw new BadInputError(`${this.name}: ${JSON.stringify(rel)} has an unknown file type`)
  }

  #xattrs (rel: string, st: ScannedEntry): Map<string, Uint8Array> | undefined {
    if (st.xattrError !== undefined) {
      const code = st.xattrError.code
      if (code === 'ENOTSUP' || code === 'EOPNOTSUPP') return undefined
      throw new BadInputError(`${this.name}: cannot list the xattrs of ${JSON.stringify(rel)}: ${st.xattrError.message}`, { cause: st.xattrError })
    }
    if (st.xattrs.length === 0) return undefined
    const out = new Map<string, Uint8Array>()
    for (const { name, value, error } of st.xattrs) {
      if (error === undefined) { out.set(name, value!); continue }
      if (error.code === 'ENODATA') continue // removed between list and get
      throw new BadInputError(`${this.name}: cannot read xattr ${name} of ${JSON.stringify(rel)}: ${error.message}`, { cause: error })
    }
    return out.size > 0 ? out : undefined
  }

  /** `st`, or BadInputError when its lstat failed. */
  #stat (st: ScannedEntry, rel: string): ScannedEntry {
    if (st.statError === undefined) return st
    throw new BadInputError(`${this.name}: cannot stat ${JSON.stringify(rel === '' ? '.' : rel)}: ${st.statError.message}`, { cause: st.statError })
  }
}

/**
 * Stream exactly `size` bytes of a regular file, refusing one that is
 * replaced, shrinks or grows meanwhile (ExactFile). Every piece is read into
 * `buf`, the walk's one read buffer: pieces are valid until the next one is
 * requested (LayerEntry.body) and one walk reads one file at a time. (Fresh
 * 1 MiB buffers per read cost page faults and GC on the push's busiest thread.)
 */
async function * readFile (abs: string, size: number, label: string, buf: Buffer): AsyncGenerator<Uint8Array> {
  const file = new ExactFile(abs, size, label)
  try {
    for (let piece = file.read(buf); piece.length > 0; piece = file.read(buf)) yield piece
  } finally {
    file.close()
  }
}
