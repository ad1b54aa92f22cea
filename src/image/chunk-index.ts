/**
 * The dedup index: which chunks a store already holds, and where. Node-local
 * (sqlite) and rebuildable: `sync()` reads the store's blob indexes that this
 * node has not seen yet, so pushes from any node dedup against each other.
 *
 * Blobs are never deleted by layerd today, so an indexed chunk stays valid.
 *
 * May import: src/errors.ts, src/format/, src/store/, src/state/.
 */
import { BLOB_INDEX_PREFIX, blobIndexKey } from '../format/keys.js'
import type { ObjectStore } from '../store/object-store.js'
import { ChunkIndexTable, type IndexedChunk } from '../state/chunk-index-table.js'
import { decodeBlobIndex } from './blob-index.js'

export type { IndexedChunk }

const SYNC_CONCURRENCY = 16

/** The dedup index of one store: its table (`storeUrl` scopes it: one node may push to several stores), synced from the store. */
export class ChunkIndex extends ChunkIndexTable {
  /** Read every blob index in the store that this node has not seen. Async; returns how many were read. */
  async sync (store: Pick<ObjectStore, 'list' | 'get'>): Promise<number> {
    const unseen: string[] = []
    for await (const key of store.list(BLOB_INDEX_PREFIX)) {
      const blob = key.slice(BLOB_INDEX_PREFIX.length)
      if (!this.isSynced(blob)) unseen.push(blob)
    }
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < unseen.length) {
        const blob = unseen[next++]!
        this.addBlob(blob, decodeBlobIndex(await store.get(blobIndexKey(blob)), blob))
      }
    }
    await Promise.all(Array.from({ length: Math.min(SYNC_CONCURRENCY, unseen.length) }, worker))
    return unseen.length
  }
}
