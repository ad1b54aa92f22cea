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
 * May import: src/errors.ts, ./base-chunk-cache.ts, ./cache-quota.ts,
 * ./write-buffer.ts, ./write-health.ts, ./shutdown-marker.ts, ./stored-chunk.ts, lmdb, node built-ins.
 */
import { mkdirSync, rmSync } from 'node:fs'
import { constants as osConstants } from 'node:os'
import { join, resolve } from 'node:path'
import { open, type Database, type RootDatabase } from 'lmdb'
import { CacheIoError, LimitExceededError, UnsupportedError } from '../errors.js'
import { BaseChunkCache } from './base-chunk-cache.js'
import {
  CacheQuota, type CacheQuotaOptions, type CacheUsage, type EntryKind, type IndexedEntry
} from './cache-quota.js'
import { currentBootId, distrustReason, fsyncPath, readMarker, writeMarker } from './shutdown-marker.js'
import { encodeStoredFrame, StoredChunkDecoder } from './stored-chunk.js'
import { WriteBuffer, type BufferedEntry } from './write-buffer.js'
import { CacheWriteHealth, describeWriteFailure, type CacheWriteHealthStats } from './write-health.js'

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

/**
 * Bumped when the on-disk layout changes. 2 added `frames`; a format-1 cache
 * is a valid format-2 cache without frames, and is upgraded in place. A
 * newer format is refused (an older layerd must not misread it).
 */
export const LMDB_CACHE_FORMAT = 2
export const DEFAULT_WRITE_DELAY_MS = 250
export const DEFAULT_WRITE_BATCH_BYTES = 16 * 1024 * 1024
const GIB = 1024 ** 3
const LMDB_FILES = ['data.mdb', 'lock.mdb']
const KIND_CODES: Record<EntryKind, number> = { chunk: 0, meta: 1 }
const KINDS: EntryKind[] = ['chunk', 'meta']

/** Share of the cache evicted when writes start failing. */
const WRITE_FAILURE_EVICT_FRACTION = 0.25

/**
 * The error behind an lmdb-js commit failure: lmdb-js rejects each write
 * with "Commit failed (see commitError for details)" whose `commitError` is
 * a promise of the real error (an errno number as `code`). That promise is
 * handled here (it has no other handler), and the errno gets its name.
 */
async function lmdbCommitCause (err: unknown): Promise<unknown> {
  const pending = (err as { commitError?: Promise<unknown> } | undefined)?.commitError
  if (pending === undefined || typeof pending.then !== 'function') return err
  const inner = await pending.then(() => err, (e: unknown) => e)
  if (inner instanceof Error && typeof (inner as { code?: unknown }).code === 'number') {
    const errno = (inner as unknown as { code: number }).code
    const name = Object.entries(osConstants.errno).find(([, n]) => n === errno)?.[0]
    if (name !== undefined) Object.assign(inner, { code: name, errno: -errno })
  }
  return inner
}

/**
 * Whether an unhandled rejection is lmdb-js's own echo of a failed commit
 * (a promise it rejects and never hands to anyone): the commit's failure
 * reached the cache through its own write promises and was counted there.
 * Handles the echo's `commitError` promise too. Sync.
 */
export function isLmdbCommitEcho (reason: unknown): boolean {
  if (!(reason instanceof Error) || !reason.message.startsWith('Commit failed')) return false
  const pending = (reason as { commitError?: Promise<unknown> }).commitError
  if (pending === undefined || typeof pending.then !== 'function') return false
  pending.then(() => {}, () => {})
  return true
}

type AccessRow = [atimeMs: number, size: number, kind: number]
type LruKey = [atimeMs: number, key: string]
interface LruEntry extends IndexedEntry { atimeMs: number }

export class LmdbChunkCache extends BaseChunkCache {
  readonly location: string
  readonly #env: RootDatabase
  readonly #chunks: Database<Buffer, string>
  readonly #frames: Database<Buffer, string>
  readonly #meta: Database<Buffer, string>
  readonly #access: Database<AccessRow, string>
  readonly #lru: Database<[number, number], LruKey>
  readonly #info: Database<unknown, string>
  readonly #buffer: WriteBuffer
  readonly #noSync: boolean
  readonly #afterCommit: (() => void) | undefined
  readonly #log: (line: string) => void
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
    const mapSize = options.mapSizeBytes ?? (Number.isFinite(cap) ? 2 * cap + GIB : 256 * GIB)
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 })
      const bootId = currentBootId()
      const previous = readMarker(dir)
      const distrust = distrustReason(previous, bootId)
      if (distrust !== undefined) {
        this.#log(`chunk cache ${dir}: discarding its contents: ${distrust}`)
        for (const f of LMDB_FILES) rmSync(join(dir, f), { force: true })
      }
      // Before the first write that skips fsync: the marker must never be behind the data. A daemon taking over from
      // one that died or handed over in this boot finds it saying so already (durably; only its pid, for messages,
      // names that earlier writer): no rewrite, so no two fsyncs while the taken-over mounts wait (issue 19).
      const alreadyOpen = distrust === undefined && previous?.state === 'open' && previous.syncFailed !== true &&
        previous.noSync === this.#noSync && bootId !== '' && previous.bootId === bootId
      if (!alreadyOpen) writeMarker(dir, { state: 'open', noSync: this.#noSync, bootId, pid: process.pid })
      // noReadAhead (MADV_RANDOM on the map): a hit reads one value, and with the disk's readahead (8 MiB on this host's
      // disk) one fault on a dropped page read megabytes around it, on the event loop (issue 14: bench/node-memory.ts).
      // (lmdb-js reads noReadAhead, open.js's MDB_NORDAHEAD flag, but its typings leave it out.)
      const options = { path: dir, noSubdir: false, mapSize, maxDbs: 8, noSync: this.#noSync, noMemInit: true, noReadAhead: true }
      this.#env = open(options)
    } catch (err) {
      throw new CacheIoError(`cannot open chunk cache ${dir}: ${(err as Error).message}`, { cause: err })
    }
    this.#chunks = this.#env.openDB({ name: 'chunks', encoding: 'binary' })
    this.#frames = this.#env.openDB({ name: 'frames', encoding: 'binary' })
    this.#meta = this.#env.openDB({ name: 'meta', encoding: 'binary' })
    this.#access = this.#env.openDB({ name: 'access' })
    this.#lru = this.#env.openDB({ name: 'lru' })
    this.#info = this.#env.openDB({ name: 'info' })
    const format = this.#info.get('format')
    if (format !== undefined && !(typeof format === 'number' && format <= LMDB_CACHE_FORMAT)) {
      void this.#env.close()
      throw new UnsupportedError(`chunk cache ${dir} has format ${String(format)}, this layerd reads ${LMDB_CACHE_FORMAT}: remove the directory`)
    }
    if (format !== LMDB_CACHE_FORMAT) this.#info.putSync('format', LMDB_CACHE_FORMAT)
    this.#buffer = new WriteBuffer({
      delayMs: options.writeDelayMs ?? DEFAULT_WRITE_DELAY_MS,
      maxBytes: options.writeBatchBytes ?? DEFAULT_WRITE_BATCH_BYTES,
      commit: async batch => await this.#commitBatch(batch),
      onError: (err, batch) => this.#batchFailed(err, batch)
    })
    quota.attach(this, this.#loadUsage())
  }

  protected readChunk (digest: string): Buffer | undefined {
    const pending = this.#buffer.get(digest)
    if (pending !== undefined) {
      if (pending.kind !== 'chunk') return undefined
      return pending.isFrame === true ? this.#decoder.decode(digest, pending.bytes) : pending.bytes
    }
    // lmdb's shared buffer reports a patched `length`; use a plain view of it.
    const frame = this.#frames.getBinaryFast(digest)
    if (frame === undefined) {
      const fast = this.#chunks.getBinaryFast(digest)
      return fast === undefined ? undefined : fast.subarray(0, fast.length)
    }
    const plain = this.#decoder.decode(digest, frame.subarray(0, frame.length))
    if (plain === undefined) {
      this.#log(`chunk cache ${this.location}: chunk ${digest} is damaged on disk; dropped, it will be fetched again`)
      void this.remove('chunk', digest).catch(() => {})
    }
    return plain
  }

  protected override encodeChunk (plain: Uint8Array, frame: Uint8Array | undefined): { bytes: Uint8Array, isFrame: boolean } {
    const stored = encodeStoredFrame(plain, frame)
    return stored === undefined ? { bytes: plain, isFrame: false } : { bytes: stored, isFrame: true }
  }

  /** The memory-mapped lmdb file (the daemon advises its pages: src/daemon/memory-settler.ts). */
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

  /** Frames decompressed by hits so far, hits served from decoded chunks kept in memory, their plain bytes, and stored values that did not decode (read as misses). Sync. */
  get decodeStats (): { decompressed: number, reused: number, decodedBytes: number, failed: number } {
    const d = this.#decoder
    return { decompressed: d.decompressed, reused: d.reused, decodedBytes: d.decodedBytes, failed: d.failed }
  }

  protected readMeta (key: string): Buffer | undefined {
    const pending = this.#buffer.get(key)
    if (pending !== undefined) return pending.kind === 'meta' ? Buffer.from(pending.bytes) : undefined
    return this.#meta.getBinary(key)
  }

  protected exists (kind: EntryKind, key: string): boolean {
    const pending = this.#buffer.get(key)
    if (pending !== undefined) return pending.kind === kind
    const row = this.#access.get(key)
    return row !== undefined && row[2] === KIND_CODES[kind]
  }

  /** Buffer the entry (a copy unless `owned`: the caller may reuse its bytes once this resolves); it is written with the next batch. */
  protected async write (kind: EntryKind, key: string, bytes: Uint8Array, atimeMs: number, owned: boolean, isFrame: boolean): Promise<void> {
    const kept = owned ? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) : Buffer.from(bytes)
    this.#buffer.add({ kind, key, bytes: kept, atimeMs, ...(isFrame ? { isFrame } : {}) })
  }

  protected remove (kind: EntryKind, key: string): Promise<void> {
    return this.#inOrder(async () => {
      const row = this.#access.get(key)
      if (row === undefined || row[2] !== KIND_CODES[kind]) return
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
    await this.#env.close()
    let syncFailed = false
    if (this.#noSync) {
      // lmdb never synced: make the file durable before calling it closed.
      try { fsyncPath(join(this.location, 'data.mdb')) } catch (err) {
        syncFailed = true
        this.#log(`chunk cache ${this.location}: final sync failed, the cache will be discarded on next open: ${(err as Error).message}`)
      }
    }
    try {
      writeMarker(this.location, { state: 'closed', noSync: this.#noSync, bootId: currentBootId(), pid: process.pid, syncFailed })
    } catch (err) {
      this.#log(`chunk cache ${this.location}: cannot record a clean close: ${(err as Error).message}`)
    }
  }

  /** Id of the last committed lmdb transaction: commits so far, for tests and benchmarks. Sync. */
  get lastTransactionId (): number {
    return (this.#env.getStats() as { lastTxnId: number }).lastTxnId
  }

  /** Write the buffered entries now. Async; resolves once they are committed (failures are logged and counted). */
  async flushWrites (): Promise<void> {
    await this.#buffer.flush()
  }

  * coldest (): Iterable<IndexedEntry> {
    for (const { key, value } of this.#lru.getRange({ snapshot: true })) {
      const entry: LruEntry = { key: key[1], kind: KINDS[value[1]] ?? 'chunk', size: value[0], atimeMs: key[0] }
      yield entry
    }
  }

  evict (entries: IndexedEntry[]): Promise<number> {
    return this.#inOrder(async () => {
      const writes: Array<Promise<unknown>> = []
      let removed = 0
      for (const e of entries) {
        const row = this.#access.get(e.key)
        const lruTime = (e as Partial<LruEntry>).atimeMs
        if (row === undefined || (lruTime !== undefined && row[0] !== lruTime)) {
          // The entry went, or was used since it was listed: at most a stale lru row is left.
          if (lruTime !== undefined) writes.push(this.#lru.remove([lruTime, e.key]))
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
        const row = this.#access.get(key)
        if (row === undefined || row[0] >= atimeMs || (minAdvanceMs > 0 && atimeMs - row[0] < minAdvanceMs)) continue
        const [oldTime, size, code] = row
        writes.push(
          this.#lru.remove([oldTime, key]),
          this.#lru.put([atimeMs, key], [size, code]),
          this.#access.put(key, [atimeMs, size, code])
        )
      }
      if (writes.length > 0) await this.#commit(writes, `save ${times.size} access times`)
    })
  }

  /** One batch of new entries: data, index rows and counters, issued in one turn (one lmdb transaction). */
  async #commitBatch (batch: BufferedEntry[]): Promise<void> {
    const writes: Array<Promise<unknown>> = []
    for (const { kind, key, bytes, atimeMs, isFrame } of batch) {
      const code = KIND_CODES[kind]
      writes.push(
        (isFrame === true ? this.#frames : this.#db(kind)).put(key, bytes),
        this.#access.put(key, [atimeMs, bytes.length, code]),
        this.#lru.put([atimeMs, key], [bytes.length, code])
      )
    }
    writes.push(this.#info.put('usage', this.#persistedUsage()))
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
    return { bytes: u.bytes - open.bytes, chunks: u.chunks - open.chunks, metaBytes: u.metaBytes - open.metaBytes, metaObjects: u.metaObjects - open.metaObjects }
  }

  /** Issue the removal of one present entry (sync) and account for it. */
  #removeRow (key: string, [atimeMs, size, code]: AccessRow): Array<Promise<unknown>> {
    const kind = KINDS[code] ?? 'chunk'
    this.quota.removed(kind, size)
    return [
      this.#db(kind).remove(key),
      ...(kind === 'chunk' ? [this.#frames.remove(key)] : []),
      this.#access.remove(key),
      this.#lru.remove([atimeMs, key]),
      this.#info.put('usage', this.#persistedUsage())
    ]
  }

  #db (kind: EntryKind): Database<Buffer, string> {
    return kind === 'chunk' ? this.#chunks : this.#meta
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
      const msg = describeWriteFailure(cause)
      failure = /MDB_MAP_FULL|ENOSPC|EDQUOT|No space/i.test(msg)
        ? new LimitExceededError(`chunk cache ${this.location} is full: cannot ${what}: ${msg}`, { cause })
        : new CacheIoError(`chunk cache ${this.location} cannot ${what}: ${msg}`, { cause })
    }
    if (this.#health.failed(cause) && !this.closed) {
      // Evict harder: pages lmdb frees are reused by the next commits without the file growing.
      const target = Math.floor(this.quota.usage().bytes * (1 - WRITE_FAILURE_EVICT_FRACTION))
      void this.quota.reclaim(target).catch(() => {})
    }
    throw failure
  }

  /** The persisted counters, or a recount when they disagree with the index (an older crash, a failed batch). */
  #loadUsage (): CacheUsage {
    const saved = this.#info.get('usage') as CacheUsage | undefined
    const rows = (this.#access.getStats() as { entryCount: number }).entryCount
    const data = [this.#chunks, this.#frames, this.#meta].reduce((n, db) => n + (db.getStats() as { entryCount: number }).entryCount, 0)
    const lru = (this.#lru.getStats() as { entryCount: number }).entryCount
    if (saved !== undefined && rows === data && rows === lru && saved.chunks + saved.metaObjects === rows) return saved
    return this.#rebuildIndex()
  }

  /**
   * Make index and counters match the data again: data without an index
   * row becomes the coldest entry, index rows without data go. Sync; only
   * after an inconsistency, never on a normal open.
   */
  #rebuildIndex (): CacheUsage {
    const usage: CacheUsage = { bytes: 0, chunks: 0, metaBytes: 0, metaObjects: 0 }
    this.#env.transactionSync(() => {
      this.#lru.clearSync()
      // Keys only: listing keys does not copy values out of the map.
      const present = KINDS.map(kind => new Set(this.#db(kind).getKeys({}) as Iterable<string>))
      for (const key of this.#frames.getKeys({}) as Iterable<string>) present[KIND_CODES.chunk]!.add(key)
      const dangling: string[] = []
      for (const { key, value } of this.#access.getRange({})) {
        if (!(present[value[2]]?.has(key) ?? false)) dangling.push(key)
      }
      for (const key of dangling) this.#access.removeSync(key)
      KINDS.forEach((kind, code) => {
        for (const key of present[code]!) {
          let row = this.#access.get(key)
          if (row === undefined || row[2] !== code) {
            row = [0, (kind === 'chunk' ? this.#frames.getBinaryFast(key) : undefined)?.length ?? this.#db(kind).getBinaryFast(key)?.length ?? 0, code]
            this.#access.putSync(key, row)
          }
          this.#lru.putSync([row[0], key], [row[1], row[2]])
          usage.bytes += row[1]
          if (kind === 'chunk') usage.chunks++
          else { usage.metaBytes += row[1]; usage.metaObjects++ }
        }
      })
      this.#info.putSync('usage', usage)
    })
    return usage
  }
}
