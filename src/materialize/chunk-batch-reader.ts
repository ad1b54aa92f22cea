/**
 * The slice of the node's chunk fetcher that export and pull use: read many
 * chunks at once (hits from the cache, misses merged into range GETs,
 * verified before use). Named apart from src/fs/file-reader.ts's
 * ChunkReader, the per-mount reader FUSE reads go through: this one only
 * reads batches, and ChunkFetcher satisfies it as it is.
 */
import type { ChunkRef } from '../format/toc.js'

export interface ChunkBatchReader {
  /**
   * The plain bytes of each chunk, in the order asked. Async. Throws
   * CorruptObjectError for a chunk that fails verification and
   * StoreUnavailableError when the store cannot be read.
   */
  read: (refs: readonly ChunkRef[]) => Promise<Buffer[]>
}
