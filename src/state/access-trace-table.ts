/**
 * The `access_traces` table: per image manifest, the chunks its mounts
 * read first, in order. A repository over the node database (schema.ts);
 * src/daemon/traces/access-traces.ts records and uses the traces.
 *
 * May import: this folder.
 */
import type { NodeDb } from './node-db.js'

/** One traced chunk: where it is stored (the shape of a format ChunkRef). */
export interface TracedChunk { digest: string, blob: string, offset: number, compressedLength: number, length: number }

export class AccessTraceTable {
  readonly #db: NodeDb

  constructor (db: NodeDb) { this.#db = db }

  /** Replace the trace of `manifest` with `chunks` (seq = index). Sync, one transaction. */
  replace (manifest: string, chunks: readonly TracedChunk[]): void {
    const insert = this.#db.prepare('INSERT INTO access_traces VALUES (?, ?, ?, ?, ?, ?, ?)')
    this.#db.transaction(() => {
      this.#db.prepare('DELETE FROM access_traces WHERE manifest = ?').run(manifest)
      chunks.forEach((r, i) => insert.run(manifest, i, r.digest, r.blob, r.offset, r.compressedLength, r.length))
    })()
  }

  /** Every manifest with a trace. Sync. */
  manifests (): string[] {
    return (this.#db.prepare('SELECT DISTINCT manifest FROM access_traces').all() as Array<{ manifest: string }>).map(r => r.manifest)
  }

  /** Forget the trace of `manifest`. Sync. */
  delete (manifest: string): void {
    this.#db.prepare('DELETE FROM access_traces WHERE manifest = ?').run(manifest)
  }

  /** The trace of `manifest` in order; empty when there is none. Sync. */
  load (manifest: string): TracedChunk[] {
    const rows = this.#db.prepare('SELECT digest, blob, offset, clen, len FROM access_traces WHERE manifest = ? ORDER BY seq').all(manifest) as
      Array<{ digest: string, blob: string, offset: number, clen: number, len: number }>
    return rows.map(r => ({ digest: r.digest, blob: r.blob, offset: r.offset, compressedLength: r.clen, length: r.len }))
  }
}
