/**
 * PageCopyDropper: while layerd is over its memory target, the copies of
 * image data that layerd itself put in the page cache leave it as soon as
 * they are no longer needed, so a byte the sandboxes read is in memory once
 * (the image file's page cache on the mount), not three times:
 *   - the store's copy: a file:// store's range that the fetcher read once is
 *     in the chunk cache from then on; its pages are dropped right after the
 *     read (POSIX_FADV_DONTNEED on that range), and each read reads no more
 *     than it asks (POSIX_FADV_RANDOM on the open file before the read: no
 *     readahead; this disk reads 8 MiB ahead, a blob is ~16 MiB, and in
 *     bench/node-memory.ts the readahead of the store's files stood at
 *     20–34 MB of the cold wave between two settles). What is left goes at
 *     the reclaimer's next settle (dropStoreReadahead()). Once under the
 *     target, a file's next read turns readahead back on (POSIX_FADV_NORMAL).
 *     Every store file read is remembered, under the target too, so the
 *     readahead of reads made before use crossed it goes at the next settle
 *     as well (before, only files read again while over it were remembered:
 *     the others' readahead stayed). Not at the crossing itself: that
 *     readahead serves the wave's next reads of those blobs from memory, and
 *     dropping it there sent them to the disk. An S3 store has none;
 *   - the chunk cache's copy: lmdb's pages that a commit wrote. They are
 *     dirty (the cache runs with noSync) and FADV_DONTNEED skips dirty pages,
 *     so a commit is followed, 1 s later (hits on a chunk just written come
 *     soon), by an fdatasync of the file on a libuv worker, its pages
 *     unmapped from layerd's read-only map, and the drop. One drop at a
 *     time; commits during one ask for one more after it. dropWrittenNow()
 *     cuts the wait short (the reclaimer calls it when a burst of reads
 *     ended: no hit is coming that the wait would serve).
 * A chunk-cache hit after that reads the disk; hits are the mounts' page-cache
 * misses, which dropping these copies does not cause (bench/node-memory.ts
 * counts them on both sides).
 *
 * May import: src/native.ts, control-protocol (types), node built-ins.
 */
import { close, closeSync, fdatasync, open, openSync } from 'node:fs'
import { promisify } from 'node:util'
import { nativeMemory } from '../../native.js'
import type { PageCopyStats } from '../client/control-protocol.js'

const openAsync = promisify(open)
const fdatasyncAsync = promisify(fdatasync)
const closeAsync = promisify(close)
const DEFAULT_DROP_DELAY_MS = 250
/** The page size the drops round to (x86-64, arm64 with 4 KiB pages). */
const PAGE = 4096

export interface PageCopyDropperOptions {
  /** True while copies should be dropped (the reclaimer is over its target). */
  active: () => boolean
  /** The chunk cache's data file (lmdb's data.mdb). */
  cacheFile: string
  /** Wait after a commit before its pages are flushed and dropped: hits on chunks just written still find them in memory. Default 250 ms (DEFAULT_DROP_DELAY_MS). */
  dropDelayMs?: number
  log: (line: string) => void
}

export class PageCopyDropper {
  readonly #o: PageCopyDropperOptions
  #dropping: Promise<void> | undefined
  #again = false
  /** Ends the wait before the pending drop (set while it waits). */
  #wake: (() => void) | undefined
  readonly #storeFiles = new Set<string>()
  /** Store fds whose readahead is off (POSIX_FADV_RANDOM), to turn back on once under the target. */
  readonly #randomFds = new Set<number>()
  readonly stats: PageCopyStats = { storeReadsDropped: 0, storeBytesDropped: 0, cacheFileDrops: 0 }

  constructor (options: PageCopyDropperOptions) {
    this.#o = options
  }

  /** A file store is about to read from `path`, open as `fd` (FsObjectStoreOptions.beforeRead): readahead off while active, back on once not; the file is remembered for dropStoreReadahead() either way. Sync; never throws. */
  readonly beforeStoreRead = (path: string, fd: number): void => {
    this.#storeFiles.add(path)
    if (!this.#o.active()) {
      if (this.#randomFds.delete(fd)) this.#advise(fd, false)
    } else if (!this.#randomFds.has(fd) && this.#advise(fd, true)) this.#randomFds.add(fd)
  }

  /** A file store read `length` bytes at `offset` of `path`, open as `fd` (FsObjectStoreOptions.afterRead). Sync; never throws. */
  readonly afterStoreRead = (path: string, fd: number, offset: number, length: number): void => {
    if (length === 0 || !this.#o.active()) return
    try {
      // The range's pages, rounded out (the kernel drops only whole pages in the range, and a chunk's range rarely
      // starts or ends on one); what it read ahead serves the next range and is dropped by dropStoreReadahead().
      const start = Math.floor(offset / PAGE) * PAGE
      nativeMemory().fadviseDontNeed(fd, start, Math.ceil((offset + length) / PAGE) * PAGE - start)
      this.#storeFiles.add(path)
      this.stats.storeReadsDropped++
      this.stats.storeBytesDropped += length
    } catch (err) {
      this.#o.log(`reclaim: cannot drop a store read's pages: ${(err as Error).message}`)
    }
  }

  /** Readahead off (`random`) or back on for the open store file `fd`. True when the kernel took it; logs failures. */
  #advise (fd: number, random: boolean): boolean {
    try {
      nativeMemory().fadviseRandom(fd, random)
      return true
    } catch (err) {
      this.#o.log(`reclaim: cannot turn the store file's readahead ${random ? 'off' : 'on'}: ${(err as Error).message}`)
      return false
    }
  }

  /** Drop all of the page cache of the store files read since the last call, active or not (the kernel's readahead past the ranges read). Sync; logs failures. */
  dropStoreReadahead (): void {
    const files = [...this.#storeFiles]
    this.#storeFiles.clear()
    for (const file of files) {
      let fd: number | undefined
      try {
        fd = openSync(file, 'r')
        nativeMemory().fadviseDontNeed(fd, 0, 0)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.#o.log(`reclaim: cannot drop the page cache of ${file}: ${(err as Error).message}`)
      } finally {
        if (fd !== undefined) closeSync(fd)
      }
    }
  }

  /** The chunk cache committed a batch of new entries (LmdbChunkCacheOptions.afterCommit). Sync; the drop runs in the background. */
  readonly afterCacheCommit = (): void => {
    if (!this.#o.active()) return
    if (this.#dropping !== undefined) { this.#again = true; return }
    // After `dropDelayMs`: a chunk just written is often hit again at once (a chunk straddling two FUSE reads).
    this.#dropping = this.#wait(this.#o.dropDelayMs ?? DEFAULT_DROP_DELAY_MS).then(async () => await this.#dropCacheFile()).finally(() => {
      this.#dropping = undefined
      if (this.#again) { this.#again = false; this.afterCacheCommit() }
    })
  }

  /** `ms`, or less if dropWrittenNow() wakes it. */
  async #wait (ms: number): Promise<void> {
    await new Promise<void>(resolve => {
      const timer = setTimeout(() => this.#wake?.(), ms)
      this.#wake = () => { clearTimeout(timer); this.#wake = undefined; resolve() }
    })
  }

  /**
   * The chunk cache pages that commits wrote leave the page cache now, without
   * the wait after the last commit: resolves once they are flushed and dropped
   * (at once when no commit waits for a drop). Async; never rejects (failures
   * are logged).
   */
  async dropWrittenNow (): Promise<void> {
    // A commit during the drop asks for one more (with its wait): cut that short too, a few rounds at most.
    for (let round = 0; round < 3 && this.#dropping !== undefined; round++) {
      this.#wake?.()
      await this.#dropping
    }
  }

  /** Resolves once no drop is running (tests, shutdown). */
  async idle (): Promise<void> {
    while (this.#dropping !== undefined) await this.#dropping
  }

  async #dropCacheFile (): Promise<void> {
    let fd: number | undefined
    try {
      fd = await openAsync(this.#o.cacheFile, 'r')
      await fdatasyncAsync(fd)
      const native = nativeMemory()
      native.adviseMappedFile(this.#o.cacheFile, 'unmap')
      native.fadviseDontNeed(fd, 0, 0)
      this.stats.cacheFileDrops++
    } catch (err) {
      this.#o.log(`reclaim: cannot drop the page cache of ${this.#o.cacheFile}: ${(err as Error).message}`)
    } finally {
      if (fd !== undefined) await closeAsync(fd).catch(() => {})
    }
  }
}
