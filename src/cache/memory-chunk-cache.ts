/**
 * MemoryChunkCache: a ChunkCache in one Map, for tests, benchmarks and
 * one-off commands. Same contract and the same CacheQuota policy as the
 * lmdb cache; nothing survives close().
 *
 * The Map's insertion order is the recency order: saving access times
 * re-inserts the touched keys, oldest first, so iteration yields the least
 * recently used entry first.
 *
 * May import: ./base-chunk-cache.ts, ./cache-quota.ts.
 */
import { BaseChunkCache } from './base-chunk-cache.js'
import { CacheQuota, type CacheQuotaOptions, type EntryKind, type IndexedEntry } from './cache-quota.js'

interface MemoryEntry { kind: EntryKind, bytes: Buffer }

export type MemoryChunkCacheOptions = CacheQuotaOptions

export class MemoryChunkCache extends BaseChunkCache {
  readonly location = 'memory'
  readonly #entries = new Map<string, MemoryEntry>()

  /** Sync. Throws UsageError for invalid quota options. */
  constructor (options: MemoryChunkCacheOptions = {}) {
    super(new CacheQuota(options))
    this.quota.attach(this, { bytes: 0, chunks: 0, metaBytes: 0, metaObjects: 0 })
  }

  protected readChunk (digest: string): Buffer | undefined {
    const e = this.#entries.get(digest)
    return e?.kind === 'chunk' ? e.bytes : undefined
  }

  protected readMeta (key: string): Buffer | undefined {
    const e = this.#entries.get(key)
    return e?.kind === 'meta' ? Buffer.from(e.bytes) : undefined
  }

  protected exists (kind: EntryKind, key: string): boolean {
    return this.#entries.get(key)?.kind === kind
  }

  protected async write (kind: EntryKind, key: string, bytes: Uint8Array, _atimeMs: number, owned: boolean): Promise<void> {
    this.#entries.set(key, { kind, bytes: owned ? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) : Buffer.from(bytes) })
  }

  protected async remove (kind: EntryKind, key: string): Promise<void> {
    const e = this.#entries.get(key)
    if (e?.kind !== kind) return
    this.#entries.delete(key)
    this.quota.removed(kind, e.bytes.length)
  }

  protected diskBytes (): number { return this.quota.usage().bytes }

  protected async closeStorage (): Promise<void> { this.#entries.clear() }

  * coldest (): Iterable<IndexedEntry> {
    for (const [key, e] of this.#entries) yield { key, kind: e.kind, size: e.bytes.length }
  }

  async evict (entries: IndexedEntry[]): Promise<number> {
    let removed = 0
    for (const { key, kind } of entries) {
      const e = this.#entries.get(key)
      if (e?.kind !== kind) continue
      this.#entries.delete(key)
      this.quota.removed(kind, e.bytes.length)
      removed++
    }
    return removed
  }

  async saveAccessTimes (times: ReadonlyMap<string, number>): Promise<void> {
    const ordered = [...times].sort((a, b) => a[1] - b[1])
    for (const [key] of ordered) {
      const e = this.#entries.get(key)
      if (e === undefined) continue
      this.#entries.delete(key)
      this.#entries.set(key, e)
    }
  }
}
