/**
 * The FUSE filesystem's ChunkReader for one mount: the node's fetcher and
 * cache, with this mount's own counters (what `layerctl stats` reports).
 *
 * May import: src/cache/, src/fs/ (types), src/format/.
 */
import type { ChunkFetcher, FetchStats } from '../../cache/chunk-fetcher.js'
import { newFetchStats } from '../../cache/chunk-fetcher.js'
import type { ChunkRef } from '../../format/toc.js'
import type { ChunkReader } from '../../fs/file-reader.js'
import { TraceRecorder } from '../traces/access-traces.js'
import { neighbourBudget, type BlobNeighbours } from './blob-neighbours.js'

export class MountChunkReader implements ChunkReader {
  readonly storeName: string
  readonly stats: FetchStats = newFetchStats()
  /** Demand misses in first-touch order: the mount's access trace. */
  readonly trace = new TraceRecorder()
  readonly #fetcher: ChunkFetcher
  readonly #onPrefetchError: (err: unknown) => void
  readonly #neighbours: () => BlobNeighbours
  readonly #isCached: (digest: string) => boolean
  readonly #budget: number
  /** Chunks this mount fetched ahead of use (neighbours, prefetch), by digest: traced on their first use. */
  readonly #ahead = new Map<string, ChunkRef>()

  constructor (fetcher: ChunkFetcher, storeName: string, opts: {
    onPrefetchError: (err: unknown) => void
    /** The image's chunks by blob, built on first miss. */
    neighbours: () => BlobNeighbours
    isCached: (digest: string) => boolean
  }) {
    this.#fetcher = fetcher
    this.storeName = storeName
    this.#onPrefetchError = opts.onPrefetchError
    this.#neighbours = opts.neighbours
    this.#isCached = opts.isCached
    this.#budget = neighbourBudget(fetcher.remoteStore)
  }

  isCached (digest: string): boolean { return this.#isCached(digest) }

  getCached (digest: string): Uint8Array | undefined {
    const data = this.#fetcher.getCached(digest, this.stats)
    if (data !== undefined && this.#ahead.size > 0) {
      const ahead = this.#ahead.get(digest)
      if (ahead !== undefined) { this.#ahead.delete(digest); this.trace.record([ahead]) }
    }
    return data
  }

  /** Demand read of `refs`, extended to their blob neighbours in the same range GETs (blob-neighbours.ts; the budget depends on the store). */
  async read (refs: readonly ChunkRef[]): Promise<Uint8Array[]> {
    this.trace.record(refs)
    const extra = this.#neighbours().extend(refs, this.#isCached, this.#budget)
    if (extra.length === 0) return await this.#fetcher.read(refs, { stats: this.stats })
    this.#fetchedAhead(extra)
    const all = await this.#fetcher.read([...refs, ...extra], { stats: this.stats })
    return all.slice(0, refs.length)
  }

  prefetch (refs: readonly ChunkRef[]): void {
    this.#fetchedAhead(refs)
    this.#fetcher.prefetch(refs, { stats: this.stats }).catch(this.#onPrefetchError)
  }

  /**
   * The trace holds the chunks a workload used in the order it first used
   * them: a demand miss when it happens, a chunk fetched ahead when it is
   * first read from the cache. Chunks another mount had cached are not seen.
   */
  #fetchedAhead (refs: readonly ChunkRef[]): void {
    for (const r of refs) if (!this.#isCached(r.digest)) this.#ahead.set(r.digest, r)
  }

  fetchedBytes (): number {
    return this.stats.fetchedBytes
  }
}
