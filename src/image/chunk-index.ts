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
  }

  /** Where the store holds `digest`, or undefined. Sync. */
  lookup (digest: string): IndexedChunk | undefined {
    const row = this.#lookup.get(this.#store, digest) as { blob: string, offset: number, clen: number, len: number } | undefined
    return row === undefined ? undefined : { blob: row.blob, offset: row.offset, compressedLength: row.clen, length: row.len }
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

  /** Read every blob index in the store that this node has not seen. Async; returns how many were read. */
  async sync (store: Pick<ObjectStore, 'list' | 'get'>): Promise<number> {
    const unseen: string[] = []
    for await (const key of store.list(BLOB_INDEX_PREFIX)) {
      const blob = key.slice(BLOB_INDEX_PREFIX.length)
      if (this.#isSynced.get(this.#store, blob) === undefined) unseen.push(blob)
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
