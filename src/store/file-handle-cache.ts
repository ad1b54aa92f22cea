/**
 * FileHandleCache: a bounded LRU of open read-only file handles, so that
 * FsObjectStore.getRange() (on the FUSE read path) costs one positioned
 * read instead of open + read + close.
 *
 * Handles are reference-counted: an evicted or invalidated handle is closed
 * only once the last read using it has finished. Opening the same path
 * concurrently opens it once.
 *
 * A cached handle keeps reading the file it opened: the owner must call
 * invalidate() when it replaces or removes that file.
 *
 * May import: node built-ins only.
 */
import { open, type FileHandle } from 'node:fs/promises'

interface Entry {
  handle: Promise<FileHandle>
  users: number
  evicted: boolean
}

export class FileHandleCache {
  readonly #capacity: number
  /** Map order is recency order: the first entry is the least recently used. */
  readonly #entries = new Map<string, Entry>()
  readonly #closing = new Set<Promise<void>>()

  /** `capacity` handles at most stay open while idle; 0 disables caching. */
  constructor (capacity: number) {
    this.#capacity = Math.max(0, Math.floor(capacity))
  }

  /** Number of cached handles; for tests. */
  get size (): number { return this.#entries.size }

  /**
   * Runs `fn` with an open read-only handle for `path`. Async. Rejects with
   * the open error (an errno error) or whatever `fn` throws. The handle must
   * not be used after `fn` settles.
   */
  async use<T> (path: string, fn: (handle: FileHandle) => Promise<T>): Promise<T> {
    if (this.#capacity === 0) {
      const handle = await open(path, 'r')
      try { return await fn(handle) } finally { await handle.close() }
    }
    const entry = this.#acquire(path)
    try {
      return await fn(await entry.handle)
    } finally {
      entry.users--
      if (entry.evicted && entry.users === 0) this.#closeEntry(entry)
    }
  }

  /** Forgets the handle for `path` (closed once idle). Synchronous. */
  invalidate (path: string): void {
    const entry = this.#entries.get(path)
    if (entry !== undefined) this.#evict(path, entry)
  }

  /** Closes every idle handle; handles in use close when their read ends. Async, idempotent. */
  async close (): Promise<void> {
    for (const [path, entry] of [...this.#entries]) this.#evict(path, entry)
    await Promise.all([...this.#closing])
  }

  #acquire (path: string): Entry {
    let entry = this.#entries.get(path)
    if (entry !== undefined) {
      // Move to the most-recently-used end.
      this.#entries.delete(path)
      this.#entries.set(path, entry)
    } else {
      const created: Entry = { handle: open(path, 'r'), users: 0, evicted: false }
      entry = created
      this.#entries.set(path, created)
      // A failed open must not stay cached; the caller sees the rejection via use().
      created.handle.catch(() => { if (this.#entries.get(path) === created) this.#evict(path, created) })
      while (this.#entries.size > this.#capacity) {
        const [oldPath, oldEntry] = this.#entries.entries().next().value as [string, Entry]
        this.#evict(oldPath, oldEntry)
      }
    }
    entry.users++
    return entry
  }

  #evict (path: string, entry: Entry): void {
    if (this.#entries.get(path) === entry) this.#entries.delete(path)
    if (entry.evicted) return
    entry.evicted = true
    if (entry.users === 0) this.#closeEntry(entry)
  }

  #closeEntry (entry: Entry): void {
    const closing: Promise<void> = entry.handle
      .then(handle => handle.close(), () => undefined)
      .catch(() => undefined)
      .finally(() => { this.#closing.delete(closing) })
    this.#closing.add(closing)
  }
}
