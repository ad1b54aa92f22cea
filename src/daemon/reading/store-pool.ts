/**
 * The stores the daemon reads from, by URL, each with its fetcher over the
 * node's one chunk cache. Chunks are addressed by content, so the cache is
 * shared across stores.
 *
 * May import: src/store/, src/cache/.
 */
import { ChunkFetcher } from '../../cache/chunk-fetcher.js'
import type { ChunkCache } from '../../cache/chunk-cache.js'
import type { ObjectStore } from '../../store/object-store.js'
import { openStore } from '../../store/open-store.js'
import type { FsObjectStoreOptions } from '../../store/fs-object-store.js'
import type { LogLine } from '../../log-line.js'
import type { RetryOptions } from '../../store/retrying-object-store.js'
import { S3_REQUEST_TIMEOUT_MS } from '../../store/s3-object-store.js'

/**
 * A reader blocked in a FUSE read waits at most about this long for a store
 * that does not answer before it gets EIO (`layerd --store-deadline`): long
 * enough to ride out a store restart, short enough that a reader learns of
 * a real outage within a minute, and retries never turn an outage into a hang.
 */
export const STORE_DEADLINE_MS = 60_000
/**
 * While a store is away, a waiting read tries it again at least this often,
 * so it completes within about this long of the store's return.
 */
export const OUTAGE_RETRY_CAP_MS = 1_000

/**
 * The read path's retries: as many attempts as fit in `deadlineMs`, and
 * a fetch cut off only after the deadline plus the longest single attempt
 * (an S3 request's own timeout), so the retry layer, not the fetcher's
 * timer, decides when a read gives up.
 */
export function readRetryOptions (deadlineMs: number): { retry: RetryOptions, fetchTimeoutMs: number } {
  return {
    retry: { deadlineMs, maxAttempts: Number.POSITIVE_INFINITY, maxDelayMs: OUTAGE_RETRY_CAP_MS },
    fetchTimeoutMs: deadlineMs + S3_REQUEST_TIMEOUT_MS
  }
}

export interface StoreLocation { store: string, s3Endpoint?: string }

/** The store part of `req` (a request, a record): its store and S3 endpoint, nothing else. */
export function storeLocationOf (req: StoreLocation): StoreLocation {
  return { store: req.store, ...(req.s3Endpoint === undefined ? {} : { s3Endpoint: req.s3Endpoint }) }
}
export interface PooledStore { store: ObjectStore, fetcher: ChunkFetcher }

export class StorePool {
  readonly #cache: ChunkCache
  readonly #log: LogLine
  readonly #stores = new Map<string, PooledStore>()

  readonly #fs: FsObjectStoreOptions
  readonly #reads: ReturnType<typeof readRetryOptions>

  /** `fs`: options for every file:// store opened (the daemon's afterRead hook). `deadlineMs`: see STORE_DEADLINE_MS. */
  constructor (cache: ChunkCache, log: LogLine, fs: FsObjectStoreOptions = {}, deadlineMs = STORE_DEADLINE_MS) {
    this.#cache = cache
    this.#log = log
    this.#fs = fs
    this.#reads = readRetryOptions(deadlineMs)
  }

  /** The store at `loc`, opened on first use. Sync; throws UsageError for a bad URL. */
  get (loc: StoreLocation): PooledStore {
    const key = `${loc.store} ${loc.s3Endpoint ?? ''}`
    let pooled = this.#stores.get(key)
    if (pooled === undefined) {
      const store = openStore(loc.store, {
        retry: this.#reads.retry,
        metered: true,
        fs: this.#fs,
        ...(loc.s3Endpoint === undefined ? {} : { s3Endpoint: loc.s3Endpoint })
      })
      pooled = { store, fetcher: new ChunkFetcher(store, this.#cache, { log: this.#log, fetchTimeoutMs: this.#reads.fetchTimeoutMs }) }
      this.#stores.set(key, pooled)
    }
    return pooled
  }

  /** Node-wide fetch counters, summed over stores. */
  fetchTotals (): { fetchedBytes: number, fetches: number, corruptChunks: number, storeErrors: number } {
    const t = { fetchedBytes: 0, fetches: 0, corruptChunks: 0, storeErrors: 0 }
    for (const { fetcher } of this.#stores.values()) {
      t.fetchedBytes += fetcher.stats.fetchedBytes
      t.fetches += fetcher.stats.fetches
      t.corruptChunks += fetcher.stats.corruptChunks
      t.storeErrors += fetcher.stats.storeErrors
    }
    return t
  }

  /** Close every fetcher and store. Idempotent. */
  async close (): Promise<void> {
    const all = [...this.#stores.values()]
    this.#stores.clear()
    for (const { fetcher, store } of all) {
      await fetcher.close()
      await store.close()
    }
  }
}
