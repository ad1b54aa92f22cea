/**
 * The `sandboxes` table: every sandbox on the node, who owns it and where
 * its state lives. A repository over the node database (schema.ts); the
 * meaning of a row (orphaned or not) is src/runtime/sandbox-registry.ts's.
 *
 * May import: this folder.
 */
import type { NodeDb } from './node-db.js'

export interface SandboxRow {
  id: string
  tier: string
  image: string
  manifest: string
  /** Where its state lives (upper layer, runtime state). */
  stateDir: string
  createdAt: string
  /** The process that owns it: a crashed owner leaves an orphan. */
  ownerPid: number
  /** Kept after its owner ends (run --keep): not an orphan. */
  keep: boolean
}

interface Sql { id: string, tier: string, image: string, manifest: string, state_dir: string, created_at: string, owner_pid: number, keep: number }

export class SandboxTable {
  readonly #db: NodeDb

  constructor (db: NodeDb) { this.#db = db }

  /** Insert a new row. Sync; throws (sqlite constraint) when the id exists. */
  add (r: SandboxRow): void {
    this.#db.prepare('INSERT INTO sandboxes VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(r.id, r.tier, r.image, r.manifest, r.stateDir, r.createdAt, r.ownerPid, r.keep ? 1 : 0)
  }

  /** Sync; no-op for an unknown id. */
  setKeep (id: string, keep: boolean): void {
    this.#db.prepare('UPDATE sandboxes SET keep = ? WHERE id = ?').run(keep ? 1 : 0, id)
  }

  /** Sync; no-op for an unknown id. */
  remove (id: string): void {
    this.#db.prepare('DELETE FROM sandboxes WHERE id = ?').run(id)
  }

  /** The row, or undefined. Sync. */
  find (id: string): SandboxRow | undefined {
    const row = this.#db.prepare('SELECT * FROM sandboxes WHERE id = ?').get(id) as Sql | undefined
    return row === undefined ? undefined : fromSql(row)
  }

  /** Every row, oldest first. Sync. */
  list (): SandboxRow[] {
    return (this.#db.prepare('SELECT * FROM sandboxes ORDER BY created_at').all() as Sql[]).map(fromSql)
  }
}

function fromSql (r: Sql): SandboxRow {
  return { id: r.id, tier: r.tier, image: r.image, manifest: r.manifest, stateDir: r.state_dir, createdAt: r.created_at, ownerPid: r.owner_pid, keep: r.keep === 1 }
}
