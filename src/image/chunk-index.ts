/**
 * The dedup index: which chunks a store already holds, and where. Node-local
 * (sqlite) and rebuildable: `sync()` reads the store's blob indexes that this
 * node has not seen yet, so pushes from any node dedup against each other.
 *
 * `layerctl gc store` deletes blobs: sync() drops the chunks of every blob
 * whose blob index is gone, and a push passes the blobs a running gc has
 * condemned (its StoreLease) as `excludeBlobs`, which lookup() then never
 * answers with (src/gc/README.md).
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
  #excluded: ReadonlySet<string> = new Set()

  /** Where the store holds `digest` in a blob not excluded by sync(), or undefined. Sync. */
  override lookup (digest: string): IndexedChunk | undefined {
    const found = super.lookup(digest)
    return found === undefined || this.#excluded.has(found.blob) ? undefined : found
  }

  /** The blobs lookup() ignores (set by sync()). Sync. */
  excludedBlobs (): string[] {
    return [...this.#excluded]
  }

  /**
   * Read every blob index in the store that this node has not seen, and
   * forget the blobs whose index is gone (collected). From now on lookup()
   * ignores `excludeBlobs` (hex digests). Async; returns how many were read.
   */
  async sync (store: Pick<ObjectStore, 'list' | 'get'>, opts: { excludeBlobs?: Iterable<string> } = {}): Promise<number> {
    this.#excluded = new Set(opts.excludeBlobs ?? [])
    const unseen: string[] = []
    const listed = new Set<string>()
    for await (const key of store.list(BLOB_INDEX_PREFIX)) {
      const blob = key.slice(BLOB_INDEX_PREFIX.length)
      listed.add(blob)
      if (!this.#excluded.has(blob) && !this.isSynced(blob)) unseen.push(blob)
    }
    this.forgetBlobs(this.syncedBlobs().filter(blob => !listed.has(blob)))
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
