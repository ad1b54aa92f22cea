/**
 * The FUSE filesystem's ChunkReader for one mount: the node's fetcher and
 * cache, with this mount's own counters (what `layerctl stats` reports).
 *
 * May import: src/cache/, src/fs/ (types), src/format/.
 */
import type { ChunkFetcher, FetchStats } from '../cache/chunk-fetcher.js'
import { newFetchStats } from '../cache/chunk-fetcher.js'
import type { ChunkRef } from '../format/toc.js'
import type { ChunkReader } from '../fs/file-reader.js'
import { TraceRecorder } from './access-traces.js'

export class MountChunkReader implements ChunkReader {
  readonly storeName: string
  readonly stats: FetchStats = newFetchStats()
  /** Demand misses in first-touch order: the mount's access trace. */
  readonly trace = new TraceRecorder()
  readonly #fetcher: ChunkFetcher
  readonly #onPrefetchError: (err: unknown) => void

  constructor (fetcher: ChunkFetcher, storeName: string, onPrefetchError: (err: unknown) => void) {
    this.#fetcher = fetcher
    this.storeName = storeName
    this.#onPrefetchError = onPrefetchError
  }

  getCached (digest: string): Uint8Array | undefined {
    return this.#fetcher.getCached(digest, this.stats)
  }

  async read (refs: readonly ChunkRef[]): Promise<Uint8Array[]> {
    this.trace.record(refs)
    return await this.#fetcher.read(refs, { stats: this.stats })
  }

  prefetch (refs: readonly ChunkRef[]): void {
    this.#fetcher.prefetch(refs, { stats: this.stats }).catch(this.#onPrefetchError)
  }

  fetchedBytes (): number {
    return this.stats.fetchedBytes
  }
}
