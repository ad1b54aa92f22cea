/**
 * LmdbChunkCache: the node's persistent, memory-mapped chunk cache
 * (lmdb-js), one per LAYERD_HOME, shared by every mount in the daemon.
 *
 * One lmdb environment in `dir` (data.mdb, lock.mdb) with six databases:
 * | db       | key             | value                                   |
 * |----------|-----------------|-----------------------------------------|
 * | frames   | sha256 hex      | plain length + the chunk's zstd frame, when smaller than the plain bytes (stored-chunk.ts) |
 * | chunks   | sha256 hex      | plain chunk bytes (no smaller frame; a hit is one memcpy) |
 * | meta     | `<prefix>/<hex>`| stored (compressed) TOC/manifest bytes  |
 * | access   | entry key       | [atimeMs, size, kind]                   |
 * | lru      | [atimeMs, key]  | [size, kind]: the eviction order        |
 * | info     | 'usage' …       | usage counters, format version          |
 *
 * Writes are batched: new entries wait in a WriteBuffer (visible to get()
 * at once) and go to lmdb together, every `writeDelayMs` or `writeBatchBytes`,
 * as ONE transaction that writes the data, both index rows and the usage
 * counters of every entry in it. Deletes, evictions and access-time flushes
 * are transactions of their own, likewise with index, data and counters
 * together. A crash therefore loses at most the last batches, and never
 * leaves index, data and counters out of step. The per-transaction cost
 * (copied B-tree branch and leaf pages, free list, meta page, sync) is what
 * made one-transaction-per-chunk write 4–15× the bytes it kept
 * (bench/cache-writes.ts; README.md).
 *
 * The index is kept here, next to the data, rather than in the node's
 * sqlite: no second store to reconcile after a crash, and index writes run
 * on lmdb's write thread instead of blocking the FUSE thread.
 *
 * Durability (README.md, "Durability"): with `noSync` (the default) lmdb
 * never fsyncs; the kernel writes pages back when it likes, so pages
 * rewritten by consecutive transactions reach the disk once. That is safe
 * against a killed process (committed pages are in the page cache), not
 * against the machine going down: a shutdown marker (shutdown-marker.ts)
 * records that the cache is open, and an open that finds the marker of an
 * fsync-less writer from an earlier boot discards the file before lmdb
 * reads it. `noSync: false` keeps lmdb-js's overlappingSync instead.
 * Entries are verified before insert, so a consistent file never holds
 * wrong bytes.
 *
 * Index mutations that read before they write (delete, eviction, access-time
 * flush) run one at a time, each after the previous one committed and after
 * the write buffer has drained, so they never act on a stale snapshot.
 *
 * A commit that fails (full disk, EIO, read-only remount, map full) never
 * fails a reader: its entries are dropped (counted), the cause is logged
 * once, new entries are skipped but for one probe per interval, the cache
 * evicts a quarter of what it holds (freed pages are reused without the
 * file growing), and the first commit that succeeds resumes caching
 * (write-health.ts). lmdb-js leaves a rejected promise of its own behind
 * each failed commit; `isLmdbCommitEcho()` names it for the daemon's
 * unhandled-rejection guard.
 *
 * One process opens a cache directory at a time (the daemon, under its pid
 * file); the quota's counters live in that process.
 *
 * The parts: lmdb-environment.ts opens and closes the environment under the
 * shutdown marker, lmdb-entry-index.ts owns the six databases and the index
 * rows, lmdb-commit-failure.ts names what a failed commit was; this class
 * batches, orders and commits (and implements BaseChunkCache's storage).
 *
 * May import: ./base-chunk-cache.ts, ./cache-quota.ts, ./write-buffer.ts, ./write-health.ts,
 * ./stored-chunk.ts, ./lmdb-environment.ts, ./lmdb-entry-index.ts, ./lmdb-commit-failure.ts, lmdb (types),
 * src/errors.ts, node built-ins.
 */
import { join, resolve } from 'node:path'
import type { RootDatabase } from 'lmdb'
import { CacheIoError } from '../errors.js'
import { BaseChunkCache } from './base-chunk-cache.js'
import { CacheQuota, type CacheQuotaOptions, type CacheUsage, type EntryKind, type IndexedEntry } from './cache-quota.js'
import { commitFailureError, lmdbCommitCause } from './lmdb-commit-failure.js'
import { LmdbEntryIndex, rowIs, rowKind, type AccessRow, type LruEntry } from './lmdb-entry-index.js'
import { closeCacheEnvironment, openCacheEnvironment } from './lmdb-environment.js'
import { encodeStoredFrame, StoredChunkDecoder } from './stored-chunk.js'
import { WriteBuffer, type BufferedEntry, type WriteBatchLimits } from './write-buffer.js'
import { CacheWriteHealth, type CacheWriteHealthStats } from './write-health.js'
import type { LogLine } from '../log-line.js'

export interface LmdbChunkCacheOptions extends CacheQuotaOptions {
  /** Address space reserved for the map. Default: 2 × cap + 1 GiB (256 GiB when uncapped); lmdb-js grows it if needed. */
  mapSizeBytes?: number
  /**
   * Never fsync; the kernel writes back. Default true. Safe against a killed
   * process; after the machine went down with the cache open, the next open
   * discards the cache (see the module doc). false: lmdb-js overlappingSync.
   */
  noSync?: boolean
  /** Longest time a new entry waits in memory before its batch is written. Default 250 ms. */
  writeDelayMs?: number
  /** Buffered bytes that start a batch at once. Default 16 MiB. */
  writeBatchBytes?: number
  /** Plain bytes of decoded frames kept in memory, so hot chunks decompress once (stored-chunk.ts). Default 16 MiB; 0 keeps none. */
  decodedCacheBytes?: number
  /** While commits fail, the first wait before a probe write (write-health.ts). Default 1,000 ms. */
  writeProbeIntervalMs?: number
  /** Called after each batch of new entries committed (the daemon drops lmdb's written pages from there while over its memory target). Sync. */
  afterCommit?: () => void
}

export const DEFAULT_WRITE_DELAY_MS = 250
export const DEFAULT_WRITE_BATCH_BYTES = 16 * 1024 * 1024
const GIB = 1024 ** 3

/** Share of the cache evicted when writes start failing. */
const WRITE_FAILURE_EVICT_FRACTION = 0.25

export class LmdbChunkCache extends BaseChunkCache {
  readonly location: string
  readonly #env: RootDatabase
  readonly #index: LmdbEntryIndex
  readonly #buffer: WriteBuffer
  readonly #noSync: boolean
  readonly #afterCommit: (() => void) | undefined
  readonly #log: LogLine
  readonly #decoder: StoredChunkDecoder
  readonly #health: CacheWriteHealth
  #serial: Promise<unknown> = Promise.resolve()

  /**
   * Open (creating) the cache in `dir`. Sync. A cache left open without
   * fsync by a writer from an earlier boot is discarded first (logged).
   * Throws CacheIoError when lmdb cannot open the directory,
   * UnsupportedError for a cache written in a newer format, UsageError for
   * invalid quota options.
   */
  static open (dir: string, options: LmdbChunkCacheOptions = {}): LmdbChunkCache {
    return new LmdbChunkCache(resolve(dir), options)
  }

  private constructor (dir: string, options: LmdbChunkCacheOptions) {
    const quota = new CacheQuota(options)
    super(quota)
    this.location = dir
    this.#noSync = options.noSync ?? true
    this.#afterCommit = options.afterCommit
    this.#log = options.log ?? (() => {})
    this.#decoder = new StoredChunkDecoder(options.decodedCacheBytes)
    this.#health = new CacheWriteHealth({
      location: dir,
      log: this.#log,
      ...(options.writeProbeIntervalMs === undefined ? {} : { probeIntervalMs: options.writeProbeIntervalMs })
    })
    const cap = quota.capBytes
    const mapSizeBytes = options.mapSizeBytes ?? (Number.isFinite(cap) ? 2 * cap + GIB : 256 * GIB)
    try {
      this.#env = openCacheEnvironment({ dir, noSync: this.#noSync, mapSizeBytes, log: this.#log })
    } catch (err) {
      throw new CacheIoError(`cannot open chunk cache ${dir}: ${(err as Error).message}`, { cause: err })
    }
    this.#index = new LmdbEntryIndex(this.#env, dir)
    this.#buffer = new WriteBuffer({
      delayMs: options.writeDelayMs ?? DEFAULT_WRITE_DELAY_MS,
      maxBytes: options.writeBatchBytes ?? DEFAULT_WRITE_BATCH_BYTES,
      commit: async batch => await this.#commitBatch(batch),
      onError: (err, batch) => this.#batchFailed(err, batch)
    })
    quota.attach(this, this.#index.loadUsage())
  }

  protected readChunk (digest: string): Buffer | undefined {
    const pending = this.#buffer.get(digest)
    if (pending !== undefined) {
      if (pending.kind !== 'chunk') return undefined
      return pending.isFrame === true ? this.#decoder.decode(digest, pending.bytes) : pending.bytes
    }
    const frame = this.#index.frame(digest)
    if (frame === undefined) return this.#index.plainChunk(digest)
    const plain = this.#decoder.decode(digest, frame)
    if (plain === undefined) {
      this.#log(`chunk cache ${this.location}: chunk ${digest} is damaged on disk; dropped, it will be fetched again`, 'warn')
      void this.remove('chunk', digest).catch(() => {})
    }
    return plain
  }

  protected override encodeChunk (plain: Uint8Array, frame: Uint8Array | undefined): { bytes: Uint8Array, isFrame: boolean } {
    const stored = encodeStoredFrame(plain, frame)
    return stored === undefined ? { bytes: plain, isFrame: false } : { bytes: stored, isFrame: true }
  }

  /** The memory-mapped lmdb file (the daemon advises its pages: src/daemon/memory/memory-settler.ts). */
  get mapFile (): string { return join(this.location, 'data.mdb') }

  /**
   * Drop the decoded chunks kept in memory (a burst of hits gives its memory
   * back once garbage-collected; the next hit on each decodes again). Sync.
   * Returns the plain bytes dropped.
   */
  releaseMemory (): number {
    return this.#decoder.release()
  }

  /** The cap on decoded chunks kept in memory (decodedCacheBytes); lowering it evicts at once. Sync. */
  get decodedCacheBytes (): number { return this.#decoder.capBytes }
  set decodedCacheBytes (bytes: number) { this.#decoder.capBytes = bytes }

  /** When a batch of new entries goes to lmdb (writeDelayMs, writeBatchBytes at first); changing it applies to the open batch at once (WriteBuffer.limits). Sync. */
  get writeBatch (): WriteBatchLimits { return this.#buffer.limits }
  set writeBatch (limits: WriteBatchLimits) { this.#buffer.limits = limits }

  /** Frames decompressed by hits so far, hits served from decoded chunks kept in memory, their plain bytes, and stored values that did not decode (read as misses). Sync. */
  get decodeStats (): { decompressed: number, reused: number, decodedBytes: number, failed: number } {
    const d = this.#decoder
    return { decompressed: d.decompressed, reused: d.reused, decodedBytes: d.decodedBytes, failed: d.failed }
  }

  protected readMeta (key: string): Buffer | undefined {
    const pending = this.#buffer.get(key)
    if (pending !== undefined) return pending.kind === 'meta' ? Buffer.from(pending.bytes) : undefined
    return this.#index.meta(key)
  }

  protected exists (kind: EntryKind, key: string): boolean {
    const pending = this.#buffer.get(key)
    if (pending !== undefined) return pending.kind === kind
    return this.#index.holds(kind, key)
  }

  /** Buffer the entry (a copy unless `owned`: the caller may reuse its bytes once this resolves); it is written with the next batch. */
  protected async write (kind: EntryKind, key: string, bytes: Uint8Array, atimeMs: number, owned: boolean, isFrame: boolean): Promise<void> {
    const kept = owned ? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) : Buffer.from(bytes)
    this.#buffer.add({ kind, key, bytes: kept, atimeMs, ...(isFrame ? { isFrame } : {}) })
  }

  protected remove (kind: EntryKind, key: string): Promise<void> {
    return this.#inOrder(async () => {
      const row = this.#index.row(key)
      if (row === undefined || !rowIs(row, kind)) return
      await this.#commit(this.#removeRow(key, row), `delete ${kind} ${key}`)
    })
  }

  protected diskBytes (): number {
    const s = this.#env.getStats() as { lastPageNumber: number, pageSize: number }
    return (s.lastPageNumber + 1) * s.pageSize
  }

  protected async closeStorage (): Promise<void> {
    await this.#buffer.flush()
    await this.#serial.catch(() => {})
    await closeCacheEnvironment(this.#env, { dir: this.location, noSync: this.#noSync, log: this.#log })
  }

  /** Id of the last committed lmdb transaction: commits so far, for tests and benchmarks. Sync. */
  get lastTransactionId (): number {
    return (this.#env.getStats() as { lastTxnId: number }).lastTxnId
  }

  /** Write the buffered entries now. Async; resolves once they are committed (failures are logged and counted). */
  async flushWrites (): Promise<void> {
    await this.#buffer.flush()
  }

  coldest (): Iterable<IndexedEntry> {
    return this.#index.coldest()
  }

  evict (entries: IndexedEntry[]): Promise<number> {
    return this.#inOrder(async () => {
      const writes: Array<Promise<unknown>> = []
      let removed = 0
      for (const e of entries) {
        const row = this.#index.row(e.key)
        const lruTime = (e as Partial<LruEntry>).atimeMs
        if (row === undefined || (lruTime !== undefined && row[0] !== lruTime)) {
          // The entry went, or was used since it was listed: at most a stale lru row is left.
          if (lruTime !== undefined) writes.push(this.#index.removeStaleLru(lruTime, e.key))
          continue
        }
        writes.push(...this.#removeRow(e.key, row))
        removed++
      }
      if (writes.length > 0) await this.#commit(writes, `evict ${removed} entries`)
      return removed
    })
  }

  saveAccessTimes (times: ReadonlyMap<string, number>, minAdvanceMs = 0): Promise<void> {
    return this.#inOrder(async () => {
      const writes: Array<Promise<unknown>> = []
      for (const [key, atimeMs] of times) {
        const row = this.#index.row(key)
        if (row === undefined || row[0] >= atimeMs || (minAdvanceMs > 0 && atimeMs - row[0] < minAdvanceMs)) continue
        writes.push(...this.#index.touch(key, row, atimeMs))
      }
      if (writes.length > 0) await this.#commit(writes, `save ${times.size} access times`)
    })
  }

  /** One batch of new entries: data, index rows and counters, issued in one turn (one lmdb transaction). */
  async #commitBatch (batch: BufferedEntry[]): Promise<void> {
    const writes: Array<Promise<unknown>> = []
    for (const entry of batch) writes.push(...this.#index.insert(entry))
    writes.push(this.#index.putUsage(this.#persistedUsage()))
    await this.#commit(writes, `store ${batch.length} entries`)
    this.#afterCommit?.()
  }

  /** A batch did not commit: its entries are not cached after all (the failure itself was logged and counted by #commit). */
  #batchFailed (_err: unknown, batch: BufferedEntry[]): void {
    if (this.closed) return
    for (const e of batch) {
      if (!this.exists(e.kind, e.key)) this.quota.removed(e.kind, e.bytes.length)
    }
    this.countWriteErrors(batch.length)
  }

  protected override admitsWrites (): boolean { return this.#health.admit() }

  protected override writeHealth (): CacheWriteHealthStats { return this.#health.stats() }

  /** Usage as the committed file will show it once the writes issued so far commit: the buffer's open entries left out. */
  #persistedUsage (): CacheUsage {
    const u = this.quota.usage()
    const open = this.#buffer.openUsage()
    // Derived files (the hot-file store) are counted again from the disk when it opens: not persisted here.
    return { bytes: u.bytes - open.bytes - this.quota.derivedBytes, chunks: u.chunks - open.chunks, metaBytes: u.metaBytes - open.metaBytes, metaObjects: u.metaObjects - open.metaObjects }
  }

  /** Issue the removal of one present entry (sync) and account for it: data, index rows, then the counters. */
  #removeRow (key: string, row: AccessRow): Array<Promise<unknown>> {
    this.quota.removed(rowKind(row), row[1])
    return [...this.#index.remove(key, row), this.#index.putUsage(this.#persistedUsage())]
  }

  /** Run `fn` after the previous index mutation and after every buffered write has committed. */
  #inOrder<T> (fn: () => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => { await this.#buffer.flush(); return await fn() }
    const next = this.#serial.then(run, run)
    this.#serial = next.catch(() => {})
    return next
  }

  async #commit (writes: Array<Promise<unknown>>, what: string): Promise<void> {
    let failure: Error
    let cause: unknown
    try {
      await Promise.all(writes)
      this.#health.succeeded()
      return
    } catch (err) {
      cause = await lmdbCommitCause(err)
      failure = commitFailureError(this.location, what, cause)
    }
    if (this.#health.failed(cause) && !this.closed) {
      // Evict harder: pages lmdb frees are reused by the next commits without the file growing.
      const target = Math.floor(this.quota.usage().bytes * (1 - WRITE_FAILURE_EVICT_FRACTION))
      void this.quota.reclaim(target).catch(() => {})
    }
    throw failure
  }
}
