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
import type { NodeDb } from '../state/node-db.js'
import { decodeBlobIndex, type BlobChunk } from './blob-index.js'

export interface IndexedChunk { blob: string, offset: number, compressedLength: number, length: number }

const SYNC_CONCURRENCY = 16

export class ChunkIndex {
  readonly #db: NodeDb
  readonly #store: string
  readonly #lookup
  readonly #insertChunk
  readonly #markSynced
  readonly #isSynced
  readonly #any
  readonly #syncedBlobs
  #excluded: ReadonlySet<string> = new Set()

  /** `storeUrl` scopes the index: one node may push to several stores. Sync. */
  constructor (db: NodeDb, storeUrl: string) {
    this.#db = db
    this.#store = storeUrl
    db.exec(`
      CREATE TABLE IF NOT EXISTS chunk_index (
        store TEXT NOT NULL, digest TEXT NOT NULL, blob TEXT NOT NULL,
        offset INTEGER NOT NULL, clen INTEGER NOT NULL, len INTEGER NOT NULL,
        PRIMARY KEY (store, digest)) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS synced_blob_index (
        store TEXT NOT NULL, blob TEXT NOT NULL, PRIMARY KEY (store, blob)) WITHOUT ROWID;`)
    this.#lookup = db.prepare('SELECT blob, offset, clen, len FROM chunk_index WHERE store = ? AND digest = ?')
    this.#insertChunk = db.prepare('INSERT OR IGNORE INTO chunk_index VALUES (?, ?, ?, ?, ?, ?)')
    this.#markSynced = db.prepare('INSERT OR IGNORE INTO synced_blob_index VALUES (?, ?)')
    this.#isSynced = db.prepare('SELECT 1 FROM synced_blob_index WHERE store = ? AND blob = ?').pluck()
    this.#any = db.prepare('SELECT 1 FROM chunk_index WHERE store = ? LIMIT 1').pluck()
    this.#syncedBlobs = db.prepare('SELECT blob FROM synced_blob_index WHERE store = ?').pluck()
  }

  /** Where the store holds `digest`, or undefined. Sync. */
  lookup (digest: string): IndexedChunk | undefined {
    const row = this.#lookup.get(this.#store, digest) as { blob: string, offset: number, clen: number, len: number } | undefined
    return row === undefined || this.#excluded.has(row.blob) ? undefined : { blob: row.blob, offset: row.offset, compressedLength: row.clen, length: row.len }
  }

  /** True when no chunk of the store is indexed (after sync(): the store holds none). Sync. */
  isEmpty (): boolean {
    return this.#any.get(this.#store) === undefined
  }

  /** Record the chunks of a blob that is now durably in the store. Sync, one transaction. */
  addBlob (blob: string, chunks: readonly BlobChunk[]): void {
    this.#db.transaction(() => {
      for (const c of chunks) this.#insertChunk.run(this.#store, c.digest, blob, c.offset, c.compressedLength, c.length)
      this.#markSynced.run(this.#store, blob)
    })()
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
      if (!this.#excluded.has(blob) && this.#isSynced.get(this.#store, blob) === undefined) unseen.push(blob)
    }
    this.#forget((this.#syncedBlobs.all(this.#store) as string[]).filter(blob => !listed.has(blob)))
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

  /** Drop every chunk of `blobs` (collected from the store). One scan of this store's rows; sync. */
  #forget (blobs: string[]): void {
    if (blobs.length === 0) return
    const list = JSON.stringify(blobs)
    this.#db.transaction(() => {
      this.#db.prepare('DELETE FROM chunk_index WHERE store = ? AND blob IN (SELECT value FROM json_each(?))').run(this.#store, list)
      this.#db.prepare('DELETE FROM synced_blob_index WHERE store = ? AND blob IN (SELECT value FROM json_each(?))').run(this.#store, list)
    })()
  }
}
