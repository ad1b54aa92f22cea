/**
 * HotFileStore: whole image files as plain local files, for FUSE passthrough
 * (src/fs/passthrough-files.ts). The kernel reads a passthrough file from a
 * real file at native speed; this store holds those files.
 *
 * - Content-addressed: a file is named by its key (src/fs/passthrough-files.ts's
 *   fileKey: sha256 over the file's chunk digests and spans, which fix its
 *   bytes), so one copy serves every image and mount that holds the file.
 * - Written once, complete (a temporary name, then rename), mode 0444 in a
 *   0700 directory owned by the daemon's user: read-only, and out of reach
 *   of sandboxes, which only ever see it through the read-only FUSE mount.
 * - Space: counted against the node cache's quota (CacheQuota's derived
 *   bytes); when the cache needs room, hot files go first, least recently
 *   used first (they are copies of cached chunks, so dropping one loses no
 *   data). Listeners hear of each removal, so mounts stop offering it.
 *
 * May import: src/errors.ts, ./cache-quota.ts (types), node built-ins.
 */
import { constants, openSync } from 'node:fs'
import { mkdir, open, readdir, rename, rm, stat, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { UsageError, describeError } from '../errors.js'
import type { CacheQuota } from './cache-quota.js'

/** What the store needs from the node cache's quota (BaseChunkCache.derivedQuota()). */
export type HotFileQuota = Pick<CacheQuota, 'attachDerived' | 'derivedAdded' | 'derivedRemoved' | 'makeRoom' | 'afterInsert'>

const KEY = /^[0-9a-f]{64}$/
const TEMP_PREFIX = '.tmp-'

export interface HotFileStoreStats { files: number, bytes: number, written: number, evicted: number, refused: number }

export class HotFileStore {
  readonly dir: string
  readonly #quota: HotFileQuota
  readonly #log: (line: string) => void
  /** Key → size; Map order is recency (oldest first): a use moves the key to the end. */
  readonly #files = new Map<string, number>()
  readonly #writing = new Map<string, Promise<boolean>>()
  readonly #listeners = new Set<(key: string) => void>()
  readonly #stats = { written: 0, evicted: 0, refused: 0 }
  #bytes = 0

  private constructor (dir: string, quota: HotFileQuota, log: (line: string) => void) {
    this.dir = dir
    this.#quota = quota
    this.#log = log
  }

  /**
   * Open (or create) the store at `dir`: files left by an earlier daemon
   * count against `quota` again, half-written ones are removed. Async.
   */
  static async open (dir: string, quota: HotFileQuota, log: (line: string) => void = () => {}): Promise<HotFileStore> {
    await mkdir(dir, { recursive: true, mode: 0o700 })
    const store = new HotFileStore(dir, quota, log)
    for (const name of await readdir(dir)) {
      const path = join(dir, name)
      if (!KEY.test(name)) {
        if (name.startsWith(TEMP_PREFIX)) await rm(path, { force: true })
        continue
      }
      const s = await stat(path)
      if (!s.isFile()) continue
      store.#files.set(name, s.size)
      store.#bytes += s.size
      quota.derivedAdded(s.size)
    }
    quota.attachDerived({ shed: async bytes => await store.shed(bytes) })
    return store
  }

  has (key: string): boolean { return this.#files.has(key) }

  /**
   * A read-only fd of the file `key` (the caller closes it), or undefined
   * when the store does not hold it. Marks it used. Sync.
   */
  openRead (key: string): number | undefined {
    if (!this.#files.has(key)) return undefined
    try {
      const fd = openSync(join(this.dir, key), constants.O_RDONLY | constants.O_NOFOLLOW)  // libuv opens with O_CLOEXEC
      const size = this.#files.get(key)!
      this.#files.delete(key)
      this.#files.set(key, size)
      return fd
    } catch (err) {
      // Removed behind our back: forget it, so it is written again.
      this.#forget(key)
      this.#log(`hot files: cannot open ${key.slice(0, 12)}…: ${describeError(err)}`)
      return undefined
    }
  }

  /**
   * Store `size` bytes under `key`, written by `fill(fd)` (which must write
   * exactly them from offset 0). Resolves true once the file is complete and
   * named, false when the quota has no room for it (nothing is written).
   * Concurrent puts of one key share one write. Async; rejects with the
   * write's error (the temporary file is removed).
   */
  async put (key: string, size: number, fill: (fd: number) => Promise<void>): Promise<boolean> {
    if (!KEY.test(key)) throw new UsageError(`hot file key must be sha256 hex, got ${JSON.stringify(key)}`)
    if (this.#files.has(key)) return true
    const running = this.#writing.get(key)
    if (running !== undefined) return await running
    const writing = this.#write(key, size, fill)
    this.#writing.set(key, writing)
    try { return await writing } finally { this.#writing.delete(key) }
  }

  /** Hear of every file removed (evicted, or found missing). */
  onRemoved (listener: (key: string) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  /** Remove least recently used files until `bytes` are freed or none is left. Async; resolves with the bytes freed. */
  async shed (bytes: number): Promise<number> {
    let freed = 0
    for (const key of [...this.#files.keys()]) {
      if (freed >= bytes) break
      const size = this.#files.get(key)
      if (size === undefined) continue
      // Unlinked while open: a file still read through passthrough keeps its data until it is closed.
      await unlink(join(this.dir, key)).catch(() => {})
      this.#forget(key)
      this.#stats.evicted++
      freed += size
    }
    return freed
  }

  stats (): HotFileStoreStats { return { files: this.#files.size, bytes: this.#bytes, ...this.#stats } }

  async #write (key: string, size: number, fill: (fd: number) => Promise<void>): Promise<boolean> {
    if (!await this.#quota.makeRoom(size)) { this.#stats.refused++; return false }
    const temp = join(this.dir, `${TEMP_PREFIX}${key}-${process.pid}`)
    const handle = await open(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o444)
    try {
      await fill(handle.fd)
      const written = (await handle.stat()).size
      if (written !== size) throw new Error(`wrote ${written} bytes, expected ${size}`)
      await handle.close()
      await rename(temp, join(this.dir, key))
    } catch (err) {
      await handle.close().catch(() => {})
      await rm(temp, { force: true })
      throw err
    }
    this.#files.set(key, size)
    this.#bytes += size
    this.#stats.written++
    this.#quota.derivedAdded(size)
    this.#quota.afterInsert()
    return true
  }

  #forget (key: string): void {
    const size = this.#files.get(key)
    if (size === undefined) return
    this.#files.delete(key)
    this.#bytes -= size
    this.#quota.derivedRemoved(size)
    for (const l of this.#listeners) {
      try { l(key) } catch (err) { this.#log(`hot files: a removal listener failed: ${describeError(err)}`) }
    }
  }
}
