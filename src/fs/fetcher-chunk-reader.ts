/**
 * The production ChunkReader: one mount's view of the node's ChunkFetcher
 * (cache hits synchronously, misses fetched with singleflight, merged range
 * GETs, verification before insert, demand before prefetch). The mount's
 * own counters are a FetchStats sink the fetcher fills for this mount's
 * traffic only.
 *
 * May import: src/cache/, ./file-reader.ts (types).
 */
import { newFetchStats, type ChunkFetcher, type FetchStats } from '../cache/chunk-fetcher.js'
import type { ChunkRef } from '../format/toc.js'
import type { ChunkReader } from './file-reader.js'

export interface FetcherChunkReader extends ChunkReader {
  /** This mount's fetch counters (hits, misses, GETs, bytes, corrupt chunks, store errors). */
  readonly fetchStats: FetchStats
}

/** A ChunkReader for one mount over the node's fetcher. Sync; holds no resources. */
export function fetcherChunkReader (fetcher: ChunkFetcher, storeName: string): FetcherChunkReader {
  const stats = newFetchStats()
  const demand = { priority: 'demand' as const, stats }
  const prefetch = { stats }
  return {
    storeName,
    fetchStats: stats,
    getCached: (digest: string) => fetcher.getCached(digest, stats),
    read: async (refs: readonly ChunkRef[]) => await fetcher.read(refs, demand),
    prefetch: (refs: readonly ChunkRef[]) => {
      // Failures are counted by the fetcher; a closed fetcher (unmounting) is no error for a hint.
      fetcher.prefetch(refs, prefetch).catch(() => {})
    },
    fetchedBytes: () => stats.fetchedBytes
  }
}
