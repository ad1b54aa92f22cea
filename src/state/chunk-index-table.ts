/**
 * The dedup index's tables: `chunk_index` (where a store holds a chunk)
 * and `synced_blob_index` (which of a store's blob indexes this node has
 * read). A repository over the node database (schema.ts), scoped to one
 * store URL; src/image/chunk-index.ts syncs it from the store.
 *
 * May import: this folder.
 */
import type { NodeDb } from './node-db.js'
import { openSqlite } from './node-db.js'

/** Where a store holds a chunk. */
export interface IndexedChunk { blob: string, offset: number, compressedLength: number, length: number }

/** A chunk of a blob, as its blob index lists it. */
export interface BlobIndexEntry { digest: string, offset: number, compressedLength: number, length: number }

export class ChunkIndexTable {
  readonly #db: NodeDb
  readonly #store: string
  readonly #lookup
  readonly #insertChunk
  readonly #markSynced
  readonly #isSynced
  readonly #any

  /** The rows of `storeUrl`. Sync. */
  constructor (db: NodeDb, storeUrl: string) {
    this.#db = db
    this.#store = storeUrl
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

  /** True when no chunk of the store is indexed. Sync. */
  isEmpty (): boolean {
    return this.#any.get(this.#store) === undefined
  }

  /** True when the blob index of `blob` has been recorded. Sync. */
  isSynced (blob: string): boolean {
    return this.#isSynced.get(this.#store, blob) !== undefined
  }

  /** Record `blob`'s chunks and mark its index read. Sync, one transaction. */
  addBlob (blob: string, chunks: readonly BlobIndexEntry[]): void {
    this.#db.transaction(() => {
      for (const c of chunks) this.#insertChunk.run(this.#store, c.digest, blob, c.offset, c.compressedLength, c.length)
      this.#markSynced.run(this.#store, blob)
    })()
  }
}

/**
 * For push workers: a read-only handle on the node database at `dbPath`
 * answering "does the store `storeUrl` hold this chunk?". The parent has
 * opened (and migrated) the database. Sync; throws when the file is missing.
 */
export function openStoredChunkLookup (dbPath: string, storeUrl: string): (digest: string) => boolean {
  const db = openSqlite(dbPath, { readonly: true, fileMustExist: true })
  const lookup = db.prepare('SELECT 1 FROM chunk_index WHERE store = ? AND digest = ?').pluck()
  return digest => lookup.get(storeUrl, digest) !== undefined
}
