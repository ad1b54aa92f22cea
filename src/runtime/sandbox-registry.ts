/**
 * Every sandbox on the node, in the node database: which process owns it
 * (a crashed owner leaves an orphan), where its state lives, whether it is
 * kept after its command (for commit). `layerctl ps` reads it; layerd's
 * start and `layerctl gc --sandboxes` clean the orphans.
 *
 * May import: src/errors.ts, src/state/, this folder.
 */
import { NotFoundError } from '../errors.js'
import type { NodeDb } from '../state/node-db.js'
import type { Tier } from './sandbox.js'

export interface SandboxRecord {
  id: string
  tier: Tier
  image: string
  manifest: string
  stateDir: string
  createdAt: string
  ownerPid: number
  /** Kept after its owner ends (run --keep): not an orphan. */
  keep: boolean
}

export type SandboxStatus = 'active' | 'kept' | 'orphaned'

export class SandboxRegistry {
  readonly #db: NodeDb

  constructor (db: NodeDb) {
    this.#db = db
    db.exec(`CREATE TABLE IF NOT EXISTS sandboxes (
      id TEXT PRIMARY KEY, tier TEXT NOT NULL, image TEXT NOT NULL, manifest TEXT NOT NULL,
      state_dir TEXT NOT NULL, created_at TEXT NOT NULL, owner_pid INTEGER NOT NULL, keep INTEGER NOT NULL)`)
  }

  add (r: SandboxRecord): void {
    this.#db.prepare('INSERT INTO sandboxes VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(r.id, r.tier, r.image, r.manifest, r.stateDir, r.createdAt, r.ownerPid, r.keep ? 1 : 0)
  }

  setKeep (id: string, keep: boolean): void {
    this.#db.prepare('UPDATE sandboxes SET keep = ? WHERE id = ?').run(keep ? 1 : 0, id)
  }

  remove (id: string): void {
    this.#db.prepare('DELETE FROM sandboxes WHERE id = ?').run(id)
  }

  /** Throws NotFoundError naming the id. */
  get (id: string): SandboxRecord {
    const row = this.#db.prepare('SELECT * FROM sandboxes WHERE id = ?').get(id) as Row | undefined
    if (row === undefined) throw new NotFoundError(`sandbox ${id} not found on this node (see \`layerctl ps\`)`)
    return fromRow(row)
  }

  list (): SandboxRecord[] {
    return (this.#db.prepare('SELECT * FROM sandboxes ORDER BY created_at').all() as Row[]).map(fromRow)
  }

  static status (r: SandboxRecord): SandboxStatus {
    if (r.keep) return 'kept'
    try { process.kill(r.ownerPid, 0); return 'active' } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'EPERM' ? 'active' : 'orphaned'
    }
  }
}

interface Row { id: string, tier: string, image: string, manifest: string, state_dir: string, created_at: string, owner_pid: number, keep: number }

function fromRow (r: Row): SandboxRecord {
  return { id: r.id, tier: r.tier as Tier, image: r.image, manifest: r.manifest, stateDir: r.state_dir, createdAt: r.created_at, ownerPid: r.owner_pid, keep: r.keep === 1 }
}
