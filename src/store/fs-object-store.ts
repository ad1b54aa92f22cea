/**
 * FsObjectStore: an ObjectStore in a local directory (`file:///abs/path`),
 * the embedded default store.
 *
 * A key `a/b/c` is the file `<root>/a/b/c`; object-key.ts rules guarantee it
 * stays under the root. put() writes `<dir>/.tmp-<random>`, fsyncs it,
 * renames it over the key and fsyncs the directory, so a reader or a crash
 * never sees part of an object. list() skips those temporary files.
 * getRange() is a positioned read through a FileHandleCache.
 *
 * Every errno is turned into a LayerdError by classifyFsError(), and only
 * there.
 *
 * May import: src/errors.ts, ./object-store.ts, ./object-key.ts,
 * ./file-handle-cache.ts.
 */
import { randomBytes } from 'node:crypto'
import { lstat, mkdir, open, readdir, readFile, rename, stat, unlink } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import {
  BadInputError, CorruptObjectError, LayerdError, LimitExceededError, NotFoundError,
  StoreUnavailableError, UsageError
} from '../errors.js'
import { FileHandleCache } from './file-handle-cache.js'
import {
  TEMP_NAME_PREFIX, assertValidKey, assertValidPrefix, assertValidRange, notFoundMessage, shortObjectMessage
} from './object-key.js'
import { bodyAfter, type ObjectBody } from './object-body.js'
import type { ListedObject, ObjectStat, ObjectStore } from './object-store.js'

export type FsStoreOp = 'get' | 'getRange' | 'put' | 'stat' | 'list' | 'delete'

export interface FsObjectStoreOptions {
  /** Idle read handles kept open for getRange(); 0 disables the cache. Default 64. */
  handleCacheSize?: number
  /** fsync file and directory on put (durability across power loss). Default true. */
  fsync?: boolean
  /** Called after each getRange() read with the file's path and descriptor and the range read (the daemon drops those pages while over its memory target). Sync; must not throw. */
  afterRead?: (path: string, fd: number, offset: number, length: number) => void
  /** Called before each getRange() read with the file's path and descriptor (the daemon turns the file's readahead off while over its memory target). Sync; must not throw. */
  beforeRead?: (path: string, fd: number) => void
}

export const DEFAULT_HANDLE_CACHE_SIZE = 64

/**
 * Turns a Node fs error met while doing `op` on `key` into a LayerdError.
 * The one place where errno codes are interpreted. Synchronous, never throws.
 */
export function classifyFsError (err: unknown, op: FsStoreOp, key: string, storeUrl: string): LayerdError {
  if (err instanceof LayerdError) return err
  const code = (err as NodeJS.ErrnoException | undefined)?.code
  const what = `cannot ${op} ${key} in store ${storeUrl}`
  switch (code) {
    case 'ENOENT':
    case 'ENOTDIR':
    case 'EISDIR':
      // On put these mean the key collides with an existing object or prefix:
      // `a` cannot be an object while `a/b` is one.
      if (op === 'put') return new BadInputError(`${what}: the key conflicts with an existing object or key prefix (${code})`, { cause: err })
      return new NotFoundError(notFoundMessage(key, storeUrl), { cause: err })
    case 'EEXIST':
    case 'ENOTEMPTY':
      return new BadInputError(`${what}: the key conflicts with an existing object or key prefix (${code})`, { cause: err })
    case 'ENAMETOOLONG':
      return new BadInputError(`${what}: the path is too long for this filesystem`, { cause: err })
    case 'EACCES':
    case 'EPERM':
      return new UsageError(`${what}: permission denied`, { cause: err })
    case 'EROFS':
      return new UsageError(`${what}: the filesystem is read-only`, { cause: err })
    case 'ENOSPC':
    case 'EDQUOT':
      return new LimitExceededError(`${what}: no space left (${code})`, { cause: err })
    default:
      // EIO, EMFILE, EBUSY, ESTALE, ...: the disk or the OS failed; retrying may help.
      return new StoreUnavailableError(`${what}: ${(err as Error | undefined)?.message ?? String(err)}`, { cause: err })
  }
}

export class FsObjectStore implements ObjectStore {
  readonly url: string
  readonly remote = false
  /** Absolute path of the store's directory. */
  readonly root: string
  readonly #handles: FileHandleCache
  readonly #fsync: boolean
  readonly #afterRead: ((path: string, fd: number, offset: number, length: number) => void) | undefined
  readonly #beforeRead: ((path: string, fd: number) => void) | undefined
  /** Directories known to exist, to skip mkdir on the push path. */
  readonly #madeDirs = new Set<string>()
  #closed = false

  /**
   * `root` is an absolute directory path; it is created on first put.
   * Synchronous, does no I/O. Throws UsageError for a relative path.
   */
  constructor (root: string, options: FsObjectStoreOptions = {}) {
    if (!root.startsWith('/')) throw new UsageError(`FsObjectStore root must be an absolute path, got ${JSON.stringify(root)}`)
    this.root = resolve(root)
    this.url = pathToFileURL(this.root).href
    this.#handles = new FileHandleCache(options.handleCacheSize ?? DEFAULT_HANDLE_CACHE_SIZE)
    this.#fsync = options.fsync ?? true
    this.#afterRead = options.afterRead
    this.#beforeRead = options.beforeRead
  }

  async get (key: string): Promise<Buffer> {
    const path = this.#pathOf('get', key)
    try {
      return await readFile(path)
    } catch (err) {
      throw classifyFsError(err, 'get', key, this.url)
    }
  }

  async getRange (key: string, offset: number, length: number): Promise<Buffer> {
    const path = this.#pathOf('getRange', key)
    assertValidRange(key, offset, length, this.url)
    const out = Buffer.allocUnsafe(length)
    let filled: number
    try {
      filled = await this.#handles.use(path, async handle => {
        // A zero-length range still proves the object exists and reaches
        // `offset`; -1 marks "ends before offset".
        if (length === 0) return (await handle.stat()).size >= offset ? 0 : -1
        this.#beforeRead?.(path, handle.fd)
        let got = 0
        while (got < length) {
          const { bytesRead } = await handle.read(out, got, length - got, offset + got)
          if (bytesRead === 0) break
          got += bytesRead
        }
        this.#afterRead?.(path, handle.fd, offset, got)
        return got
      })
    } catch (err) {
      throw classifyFsError(err, 'getRange', key, this.url)
    }
    if (filled < length) throw new CorruptObjectError(shortObjectMessage(key, this.url, offset, length, Math.max(0, filled)))
    return out
  }

  async put (key: string, data: ObjectBody): Promise<void> {
    const path = this.#pathOf('put', key)
    const slash = path.lastIndexOf('/')
    const dir = path.slice(0, slash)
    const tempPath = `${dir}/${TEMP_NAME_PREFIX}${randomBytes(8).toString('hex')}`
    try {
      await this.#ensureDir(dir)
      try {
        await this.#writeDurably(tempPath, data)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        // The directory went away since we made it (a delete, a cleanup): once more.
        this.#madeDirs.clear()
        await this.#ensureDir(dir)
        await this.#writeDurably(tempPath, data)
      }
      await rename(tempPath, path)
      this.#handles.invalidate(path)
      if (this.#fsync) await this.#syncDir(dir)
    } catch (err) {
      await unlink(tempPath).catch(() => undefined)
      throw classifyFsError(err, 'put', key, this.url)
    }
  }

  async stat (key: string): Promise<ObjectStat | undefined> {
    const path = this.#pathOf('stat', key)
    try {
      const st = await stat(path)
      return st.isFile() ? { size: st.size, modified: st.mtime } : undefined
    } catch (err) {
      const classified = classifyFsError(err, 'stat', key, this.url)
      if (classified instanceof NotFoundError) return undefined
      throw classified
    }
  }

  async * list (prefix: string): AsyncIterable<string> {
    this.#assertOpen('list')
    assertValidPrefix(prefix, this.url)
    const slash = prefix.lastIndexOf('/')
    const dirKey = prefix.slice(0, slash + 1)
    yield * this.#walk(dirKey, prefix.slice(slash + 1), prefix)
  }

  async * listObjects (prefix: string): AsyncIterable<ListedObject> {
    for await (const key of this.list(prefix)) {
      try {
        const st = await lstat(join(this.root, key))
        if (st.isFile()) yield { key, size: st.size, modified: st.mtime }
      } catch (err) {
        const classified = classifyFsError(err, 'list', key, this.url)
        if (!(classified instanceof NotFoundError)) throw classified // deleted since it was listed: skip it
      }
    }
  }

  async delete (key: string): Promise<void> {
    const path = this.#pathOf('delete', key)
    this.#handles.invalidate(path)
    try {
      await unlink(path)
    } catch (err) {
      const classified = classifyFsError(err, 'delete', key, this.url)
      if (!(classified instanceof NotFoundError)) throw classified
    }
  }

  async close (): Promise<void> {
    this.#closed = true
    await this.#handles.close()
  }

  /**
   * Yields the keys under directory `dirKey` (`''` or ending in `/`) whose
   * name starts with `namePrefix`, recursing into matching subdirectories.
   */
  async * #walk (dirKey: string, namePrefix: string, listPrefix: string): AsyncGenerator<string> {
    let entries
    try {
      entries = await readdir(join(this.root, dirKey), { withFileTypes: true })
    } catch (err) {
      const classified = classifyFsError(err, 'list', listPrefix, this.url)
      if (classified instanceof NotFoundError) return
      throw classified
    }
    for (const entry of entries) {
      if (!entry.name.startsWith(namePrefix) || entry.name.startsWith(TEMP_NAME_PREFIX)) continue
      if (entry.isDirectory()) yield * this.#walk(`${dirKey}${entry.name}/`, '', listPrefix)
      else if (entry.isFile()) yield dirKey + entry.name
    }
  }

  async #writeDurably (tempPath: string, data: ObjectBody): Promise<void> {
    const handle = await open(tempPath, 'wx', 0o644)
    try {
      // Parts go out in one writev (libuv loops over IOV_MAX); a short write resumes after what was written.
      for (let rest = bodyAfter(data, 0); rest.length > 0;) {
        const { bytesWritten } = await handle.writev(rest)
        if (bytesWritten === 0) throw new Error(`writev of ${tempPath} wrote nothing`)
        rest = bodyAfter(rest, bytesWritten)
      }
      if (this.#fsync) await handle.datasync()
    } finally {
      await handle.close()
    }
  }


  async #syncDir (dir: string): Promise<void> {
    const handle = await open(dir, 'r')
    try { await handle.sync() } finally { await handle.close() }
  }

  async #ensureDir (dir: string): Promise<void> {
    if (this.#madeDirs.has(dir)) return
    await mkdir(dir, { recursive: true })
    this.#madeDirs.add(dir)
  }

  #pathOf (op: FsStoreOp, key: string): string {
    this.#assertOpen(op)
    assertValidKey(key, this.url)
    return `${this.root === '/' ? '' : this.root}/${key}`
  }

  #assertOpen (op: string): void {
    if (this.#closed) throw new UsageError(`cannot ${op}: store ${this.url} is closed`)
  }
}
