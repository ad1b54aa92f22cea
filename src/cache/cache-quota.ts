/**
 * CacheQuota: the eviction policy, kept apart from the cache backends (as
 * cvmfs keeps quota.h apart from cache.h). Backends store and index entries;
 * the quota decides what goes.
 *
 * - Usage accounting (bytes, chunk and metadata counts): the backend reports
 *   every insert and removal, synchronously, when it issues the write.
 * - Size cap with watermarks: above `high` an eviction runs in the
 *   background down to `low`; an insert that would exceed the cap waits for
 *   it (and is refused if nothing can be evicted).
 * - Pins: in-memory reference counts; pinned keys are never evicted.
 * - Recency: a hit only records (key → now) in a Map. The map is handed to
 *   the backend to persist every `maintenanceIntervalMs` and before each
 *   eviction, so hits never write and recency survives a restart (up to the
 *   last flush). The timer's flushes skip keys whose persisted time is less
 *   than `recencyResolutionMs` old (a chunk hit by every container of a
 *   deploy is rewritten once a minute, not every 5 s); flushes before an
 *   eviction and at close are exact.
 * - Proactive reclaim: the same timer evicts down to `low` whenever usage is
 *   above it, so bursts find free room below `high` instead of evicting in
 *   the middle of a read.
 *
 * May import: src/errors.ts. Nothing else from the project.
 */
import { UsageError } from '../errors.js'
import type { LogLine } from '../log-line.js'

export type EntryKind = 'chunk' | 'meta'

/**
 * Bytes kept outside the backend that are derived from what it holds (the
 * passthrough hot files, src/cache/hot-file-store.ts: whole files written
 * from cached chunks). They count against the same cap, and go first when
 * room is needed: dropping one loses no data, only speed.
 */
export interface DerivedSpace {
  /** Free at least `bytes` if it can, calling quota.derivedRemoved() for each removal. Async; resolves with the bytes freed. */
  shed: (bytes: number) => Promise<number>
}

export interface IndexedEntry { key: string, kind: EntryKind, size: number }

export interface CacheUsage { bytes: number, chunks: number, metaBytes: number, metaObjects: number }

/** What a backend gives the quota. */
export interface EvictionSource {
  /**
   * Entries, least recently used first, by the access times persisted so far.
   * Lazy; the quota stops iterating early. Sync.
   */
  coldest: () => Iterable<IndexedEntry>
  /**
   * Remove these entries, data and index, calling quota.removed() for each
   * one actually present when its removal is issued. Async; resolves with
   * the number removed once the removal is durable-in-order (committed).
   */
  evict: (entries: IndexedEntry[]) => Promise<number>
  /**
   * Persist access times (ms since the epoch). Keys no longer cached are
   * ignored, and so are keys whose persisted time is less than
   * `minAdvanceMs` older than the new one. Async.
   */
  saveAccessTimes: (times: ReadonlyMap<string, number>, minAdvanceMs?: number) => Promise<void>
  /**
   * Commit entries the backend still holds in memory, so coldest() sees
   * them. Async. Backends that write at once need not have it.
   */
  flushWrites?: () => Promise<void>
}

export interface CacheQuotaOptions {
  /** Cap on `usage.bytes`. Default Infinity (no eviction). */
  capBytes?: number
  /** Fractions of the cap. Defaults 0.9 and 0.8. */
  highWatermark?: number
  lowWatermark?: number
  /** Persist recency and reclaim down to low every this often; 0 disables the timer. Default 5,000. */
  maintenanceIntervalMs?: number
  /** The timer does not rewrite an access time persisted less than this long ago. Default 60,000. */
  recencyResolutionMs?: number
  /** Milliseconds since the epoch; injectable for tests. */
  clock?: () => number
  /** Where background failures are reported. Default: dropped (they are retried next tick). */
  log?: LogLine
}

export const DEFAULT_HIGH_WATERMARK = 0.9
export const DEFAULT_LOW_WATERMARK = 0.8
export const DEFAULT_MAINTENANCE_INTERVAL_MS = 5_000
export const DEFAULT_RECENCY_RESOLUTION_MS = 60_000
/** Entries removed per eviction transaction. */
const EVICT_BATCH_ENTRIES = 1024

export class CacheQuota {
  readonly capBytes: number
  readonly highBytes: number
  readonly lowBytes: number
  readonly #intervalMs: number
  readonly #resolutionMs: number
  readonly #clock: () => number
  readonly #log: LogLine
  readonly #usage: CacheUsage = { bytes: 0, chunks: 0, metaBytes: 0, metaObjects: 0 }
  readonly #pins = new Map<string, number>()
  #touched = new Map<string, number>()
  #evictions = 0
  #source: EvictionSource | undefined
  #derived: DerivedSpace | undefined
  #derivedBytes = 0
  #reclaiming: Promise<number> | undefined
  #timer: NodeJS.Timeout | undefined
  #closed = false

  /** Throws UsageError for a non-positive cap or watermarks outside 0 < low <= high <= 1. */
  constructor (options: CacheQuotaOptions = {}) {
    const cap = options.capBytes ?? Infinity
    const high = options.highWatermark ?? DEFAULT_HIGH_WATERMARK
    const low = options.lowWatermark ?? DEFAULT_LOW_WATERMARK
    if (!(cap > 0)) throw new UsageError(`cache size cap must be positive, got ${cap}`)
    if (!(low > 0 && low <= high && high <= 1)) {
      throw new UsageError(`cache watermarks must satisfy 0 < low <= high <= 1, got low ${low}, high ${high}`)
    }
    this.capBytes = cap
    this.highBytes = Math.floor(cap * high)
    this.lowBytes = Math.floor(cap * low)
    this.#intervalMs = options.maintenanceIntervalMs ?? DEFAULT_MAINTENANCE_INTERVAL_MS
    this.#resolutionMs = options.recencyResolutionMs ?? DEFAULT_RECENCY_RESOLUTION_MS
    this.#clock = options.clock ?? Date.now
    this.#log = options.log ?? (() => {})
  }

  /** Connect the backend and its persisted usage, and start the timer. Sync; once. */
  attach (source: EvictionSource, usage: CacheUsage): void {
    if (this.#source !== undefined) throw new UsageError('CacheQuota is already attached to a cache')
    this.#source = source
    Object.assign(this.#usage, usage)
    if (this.#intervalMs > 0) {
      this.#timer = setInterval(() => { void this.#maintain() }, this.#intervalMs)
      this.#timer.unref()
    }
  }

  usage (): CacheUsage { return { ...this.#usage } }

  /** Connect the derived files' store (once). Their bytes count in `usage().bytes` from derivedAdded() on. Sync. */
  attachDerived (space: DerivedSpace): void {
    if (this.#derived !== undefined) throw new UsageError('CacheQuota already has a derived-file store')
    this.#derived = space
  }

  /** A derived file was written / removed. Sync. */
  derivedAdded (size: number): void { this.#usage.bytes += size; this.#derivedBytes += size }
  derivedRemoved (size: number): void { this.#usage.bytes -= size; this.#derivedBytes -= size }
  get derivedBytes (): number { return this.#derivedBytes }
  get evictions (): number { return this.#evictions }
  get pinnedCount (): number { return this.#pins.size }

  /** Backend hooks: an insert / a removal was issued. Sync. */
  added (kind: EntryKind, size: number): void { this.#count(kind, size, 1) }
  removed (kind: EntryKind, size: number): void { this.#count(kind, size, -1) }

  /** A hit: remember it in memory only. Sync, O(1). */
  touch (key: string): void { this.#touched.set(key, this.#clock()) }

  /** Access time to store with a new entry. */
  now (): number { return this.#clock() }

  pin (keys: Iterable<string>): void {
    for (const k of keys) this.#pins.set(k, (this.#pins.get(k) ?? 0) + 1)
  }

  unpin (keys: Iterable<string>): void {
    for (const k of keys) {
      const n = this.#pins.get(k)
      if (n === undefined) continue
      if (n <= 1) this.#pins.delete(k)
      else this.#pins.set(k, n - 1)
    }
  }

  isPinned (key: string): boolean { return this.#pins.has(key) }

  /**
   * Before inserting `size` bytes: true when they fit under the cap, after
   * waiting for an eviction if needed; false when they cannot (everything
   * left is pinned or recently used). Async.
   */
  async makeRoom (size: number): Promise<boolean> {
    if (this.#usage.bytes + size <= this.capBytes) return true
    await this.reclaim(Math.max(0, Math.min(this.lowBytes, this.capBytes - size)))
    return this.#usage.bytes + size <= this.capBytes
  }

  /** After an insert: start a background eviction when above the high watermark. Sync. */
  afterInsert (): void {
    if (this.#usage.bytes > this.highBytes && this.#reclaiming === undefined) {
      this.reclaim().catch(err => this.#log(`cache eviction failed: ${(err as Error).message}`, 'warn'))
    }
  }

  /**
   * Evict least recently used, unpinned entries until usage is at most
   * `targetBytes` (default: the low watermark) or nothing evictable is left.
   * One eviction runs at a time; a call during one waits for it and goes on
   * if usage is still above its own target. Async; resolves with the number
   * of entries evicted by this call's own passes.
   */
  async reclaim (targetBytes = this.lowBytes): Promise<number> {
    while (this.#reclaiming !== undefined) await this.#reclaiming.catch(() => 0)
    if (this.#usage.bytes <= targetBytes || this.#source === undefined) return 0
    this.#reclaiming = this.#evictTo(this.#source, targetBytes)
    try { return await this.#reclaiming } finally { this.#reclaiming = undefined }
  }

  /**
   * Hand the hits recorded since the last flush to the backend; `coarse`
   * (the timer's flushes) skips keys persisted less than the recency
   * resolution ago. Async.
   */
  async flushAccess (coarse = false): Promise<void> {
    if (this.#touched.size === 0 || this.#source === undefined) return
    const batch = this.#touched
    this.#touched = new Map()
    try {
      await this.#source.saveAccessTimes(batch, coarse ? this.#resolutionMs : 0)
    } catch (err) {
      // Keep the newer of the two times so a later flush retries them.
      for (const [k, t] of batch) if (!this.#touched.has(k)) this.#touched.set(k, t)
      throw err
    }
  }

  /** Stop the timer, let a running eviction finish, persist recency. Idempotent. Async. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#timer !== undefined) clearInterval(this.#timer)
    await this.#reclaiming?.catch(() => 0)
    await this.flushAccess()
  }

  async #evictTo (source: EvictionSource, targetBytes: number): Promise<number> {
    if (this.#derived !== undefined && this.#derivedBytes > 0) {
      try {
        await this.#derived.shed(this.#usage.bytes - targetBytes)
      } catch (err) {
        this.#log(`cache eviction: derived files: ${(err as Error).message}`)
      }
      if (this.#usage.bytes <= targetBytes) return 0
    }
    await source.flushWrites?.()
    await this.flushAccess()
    let evicted = 0
    while (this.#usage.bytes > targetBytes) {
      const need = this.#usage.bytes - targetBytes
      const batch: IndexedEntry[] = []
      let freed = 0
      for (const e of source.coldest()) {
        // Hit since the last flush: hot, whatever the persisted order says.
        if (this.#pins.has(e.key) || this.#touched.has(e.key)) continue
        batch.push(e)
        freed += e.size
        if (freed >= need || batch.length >= EVICT_BATCH_ENTRIES) break
      }
      if (batch.length === 0) break
      const removed = await source.evict(batch)
      evicted += removed
      this.#evictions += removed
      if (removed === 0) break
    }
    return evicted
  }

  async #maintain (): Promise<void> {
    if (this.#closed) return
    try {
      await this.flushAccess(true)
      if (this.#usage.bytes > this.lowBytes) await this.reclaim()
    } catch (err) {
      this.#log(`cache maintenance failed: ${(err as Error).message}`, 'warn')
    }
  }

  #count (kind: EntryKind, size: number, sign: 1 | -1): void {
    this.#usage.bytes += sign * size
    if (kind === 'chunk') this.#usage.chunks += sign
    else { this.#usage.metaBytes += sign * size; this.#usage.metaObjects += sign }
  }
}
