/**
 * BaseChunkCache: the ChunkCache behaviour every backend shares — argument
 * and content checks, hit/miss counting, one write per key at a time, the
 * quota's cap and recency hooks, pins, close. A backend supplies storage
 * primitives and the quota's EvictionSource.
 *
 * May import: src/errors.ts, src/format/, ./chunk-cache.ts, ./cache-quota.ts, ./write-health.ts (types).
 */
import { UsageError } from '../errors.js'
import {
  assertChunkDigest, assertContentMatches, metaKeyDigest,
  type ChunkCache, type ChunkCacheStats, type PutMetaOptions, type PutOptions
} from './chunk-cache.js'
import type { CacheQuota, EntryKind, EvictionSource, IndexedEntry } from './cache-quota.js'
import type { CacheWriteHealthStats } from './write-health.js'

export abstract class BaseChunkCache implements ChunkCache, EvictionSource {
  abstract readonly location: string
  protected readonly quota: CacheQuota
  #hits = 0
  #misses = 0
  #rejected = 0
  #writeErrors = 0
  readonly #writing = new Map<string, Promise<void>>()
  #closed = false
  #closing: Promise<void> | undefined

  constructor (quota: CacheQuota) {
    this.quota = quota
  }

  // ---- storage primitives, implemented by each backend ----
  /** The chunk's bytes as a view valid until the next call, or undefined. Sync. */
  protected abstract readChunk (digest: string): Buffer | undefined
  /** A copy of the metadata object, or undefined. Sync. */
  protected abstract readMeta (key: string): Buffer | undefined
  /** Whether an entry is stored (committed). Sync. */
  protected abstract exists (kind: EntryKind, key: string): boolean
  /**
   * Store a new entry; called after quota.added(). Async, resolves once
   * visible to reads. `owned`: the caller will never change `bytes`, so they
   * may be kept without a copy.
   */
  protected abstract write (kind: EntryKind, key: string, bytes: Uint8Array, atimeMs: number, owned: boolean, isFrame: boolean): Promise<void>
  /** Remove one entry, calling quota.removed() if it was present. Async. */
  protected abstract remove (kind: EntryKind, key: string): Promise<void>
  /**
   * The form in which a chunk is stored (its size is what the quota counts):
   * by default the plain bytes; a backend that stores frames returns its own
   * new buffer and `isFrame`. Sync.
   */
  protected encodeChunk (plain: Uint8Array, _frame: Uint8Array | undefined): { bytes: Uint8Array, isFrame: boolean } {
    return { bytes: plain, isFrame: false }
  }
  /**
   * Whether a new entry should be written now (false while the backend's
   * writes fail, but for its probes; the chunk is still served). Sync.
   */
  protected admitsWrites (): boolean { return true }
  /** The backend's write-failure counters (write-health.ts); zeros for one that cannot fail. */
  protected writeHealth (): CacheWriteHealthStats { return { writeFailures: 0, skippedWrites: 0, writesFailing: false } }
  /** On-disk footprint in bytes. Sync. */
  protected abstract diskBytes (): number
  /** Release the storage. Called once, after the quota has flushed. Async. */
  protected abstract closeStorage (): Promise<void>
  abstract coldest (): Iterable<IndexedEntry>
  abstract evict (entries: IndexedEntry[]): Promise<number>
  abstract saveAccessTimes (times: ReadonlyMap<string, number>, minAdvanceMs?: number): Promise<void>

  /** The quota, for the files derived from this cache that count against its cap (src/cache/hot-file-store.ts). */
  derivedQuota (): Pick<CacheQuota, 'attachDerived' | 'derivedAdded' | 'derivedRemoved' | 'makeRoom' | 'afterInsert' | 'derivedBytes'> {
    return this.quota
  }

  get (digest: string): Buffer | undefined {
    this.#assertOpen('get')
    const view = this.readChunk(digest)
    if (view === undefined) { this.#misses++; return undefined }
    this.#hits++
    this.quota.touch(digest)
    return view
  }

  has (digest: string): boolean {
    this.#assertOpen('has')
    return this.exists('chunk', digest)
  }

  async put (digest: string, plain: Uint8Array, options: PutOptions = {}): Promise<void> {
    this.#assertOpen('put')
    assertChunkDigest(digest, this.location)
    if (options.verified !== true) assertContentMatches(digest, plain, `chunk ${digest}`, this.location)
    await this.#insert('chunk', digest, plain, false, options.transfer === true, options.frame)
  }

  async delete (digest: string): Promise<void> {
    this.#assertOpen('delete')
    assertChunkDigest(digest, this.location)
    await this.#writing.get(digest)?.catch(() => {})
    await this.remove('chunk', digest)
  }

  getMeta (key: string): Buffer | undefined {
    this.#assertOpen('getMeta')
    const bytes = this.readMeta(key)
    if (bytes === undefined) { this.#misses++; return undefined }
    this.#hits++
    this.quota.touch(key)
    return bytes
  }

  async putMeta (key: string, bytes: Uint8Array, options: PutMetaOptions = {}): Promise<void> {
    this.#assertOpen('putMeta')
    const digest = metaKeyDigest(key, this.location)
    if (options.verified !== true) assertContentMatches(digest, bytes, `metadata object ${key}`, this.location)
    if (options.pinned === true) this.quota.pin([key])
    await this.#insert('meta', key, bytes, this.quota.isPinned(key), options.transfer === true)
  }

  pin (keys: Iterable<string>): void { this.#assertOpen('pin'); this.quota.pin(keys) }
  unpin (keys: Iterable<string>): void { this.#assertOpen('unpin'); this.quota.unpin(keys) }

  stats (): ChunkCacheStats {
    const u = this.quota.usage()
    return {
      bytes: u.bytes,
      chunks: u.chunks,
      metaBytes: u.metaBytes,
      metaObjects: u.metaObjects,
      pinned: this.quota.pinnedCount,
      hits: this.#hits,
      misses: this.#misses,
      evictions: this.quota.evictions,
      rejected: this.#rejected,
      writeErrors: this.#writeErrors,
      ...this.writeHealth(),
      capBytes: this.quota.capBytes,
      diskBytes: this.#closed ? 0 : this.diskBytes()
    }
  }

  async reclaim (): Promise<number> {
    this.#assertOpen('reclaim')
    return await this.quota.reclaim()
  }

  async dropUnpinnedMeta (options: { dryRun?: boolean } = {}): Promise<{ objects: number, bytes: number }> {
    this.#assertOpen('dropUnpinnedMeta')
    await (this as EvictionSource).flushWrites?.() // coldest() lists what is committed
    const victims: IndexedEntry[] = []
    for (const e of this.coldest()) if (e.kind === 'meta' && !this.quota.isPinned(e.key) && !this.#writing.has(e.key)) victims.push(e)
    const bytes = victims.reduce((n, e) => n + e.size, 0)
    if (options.dryRun !== true) for (const e of victims) await this.remove('meta', e.key)
    return { objects: victims.length, bytes }
  }

  close (): Promise<void> {
    this.#closing ??= this.#close()
    return this.#closing
  }

  protected get closed (): boolean { return this.#closed }

  /** A backend that writes after put() resolved reports entries it then failed to store. */
  protected countWriteErrors (entries: number): void { this.#writeErrors += entries }

  async #close (): Promise<void> {
    await Promise.allSettled([...this.#writing.values()])
    await this.quota.close().catch(() => {})
    this.#closed = true
    await this.closeStorage()
  }

  /** One write per key at a time; an existing entry is left as it is (content-addressed). */
  #insert (kind: EntryKind, key: string, bytes: Uint8Array, pinned: boolean, owned: boolean, frame?: Uint8Array): Promise<void> {
    const running = this.#writing.get(key)
    if (running !== undefined) return running
    if (this.exists(kind, key)) return Promise.resolve()
    const stored = kind === 'chunk' ? this.encodeChunk(bytes, frame) : { bytes, isFrame: false }
    const p = this.#write(kind, key, stored.bytes, pinned, owned || stored.isFrame, stored.isFrame).finally(() => this.#writing.delete(key))
    this.#writing.set(key, p)
    return p
  }

  async #write (kind: EntryKind, key: string, bytes: Uint8Array, pinned: boolean, owned: boolean, isFrame: boolean): Promise<void> {
    if (!this.admitsWrites()) return
    // Pinned metadata is small and must stay: it goes in even above the cap.
    let room = true
    try {
      if (!pinned) room = await this.quota.makeRoom(bytes.length)
    } catch {
      room = false // the eviction could not commit: the backend counted and logged it
    }
    if (!room) { this.#rejected++; return }
    if (this.#closed) return
    this.quota.added(kind, bytes.length)
    try {
      await this.write(kind, key, bytes, this.quota.now(), owned, isFrame)
    } catch (err) {
      this.quota.removed(kind, bytes.length)
      throw err
    }
    this.quota.afterInsert()
  }

  #assertOpen (op: string): void {
    if (this.#closed || this.#closing !== undefined) throw new UsageError(`cannot ${op}: cache ${this.location} is closed`)
  }
}
