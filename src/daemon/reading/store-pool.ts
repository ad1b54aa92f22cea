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

/**
 * A reader blocked in a FUSE read waits at most about this long for a store
 * that does not answer before it gets EIO: retries must not turn an outage
 * into a hang.
 */
export const READ_RETRY_DEADLINE_MS = 5_000

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

  /** `fs`: options for every file:// store opened (the daemon's afterRead hook). */
  constructor (cache: ChunkCache, log: LogLine, fs: FsObjectStoreOptions = {}) {
    this.#cache = cache
    this.#log = log
    this.#fs = fs
  }

  /** The store at `loc`, opened on first use. Sync; throws UsageError for a bad URL. */
  get (loc: StoreLocation): PooledStore {
    const key = `${loc.store} ${loc.s3Endpoint ?? ''}`
    let pooled = this.#stores.get(key)
    if (pooled === undefined) {
      const store = openStore(loc.store, {
        retry: { deadlineMs: READ_RETRY_DEADLINE_MS },
        metered: true,
        fs: this.#fs,
        ...(loc.s3Endpoint === undefined ? {} : { s3Endpoint: loc.s3Endpoint })
      })
      pooled = { store, fetcher: new ChunkFetcher(store, this.#cache, { log: this.#log }) }
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
