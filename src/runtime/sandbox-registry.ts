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
import { SandboxTable, type SandboxRow } from '../state/sandbox-table.js'
import type { Tier } from './sandbox.js'

/** A sandbox's row (src/state/sandbox-table.ts), with its tier typed. */
export interface SandboxRecord extends Omit<SandboxRow, 'tier'> { tier: Tier }

export type SandboxStatus = 'active' | 'kept' | 'orphaned'

export class SandboxRegistry {
  readonly #rows: SandboxTable

  constructor (db: NodeDb) {
    this.#rows = new SandboxTable(db)
  }

  /** Sync; throws when the id is taken. */
  add (r: SandboxRecord): void {
    this.#rows.add(r)
  }

  /** Sync. */
  setKeep (id: string, keep: boolean): void {
    this.#rows.setKeep(id, keep)
  }

  /** Sync. */
  remove (id: string): void {
    this.#rows.remove(id)
  }

  /** Sync. Throws NotFoundError naming the id. */
  get (id: string): SandboxRecord {
    const row = this.#rows.find(id)
    if (row === undefined) throw new NotFoundError(`sandbox ${id} not found on this node (see \`layerctl ps\`)`)
    return asRecord(row)
  }

  /** Every sandbox, oldest first. Sync. */
  list (): SandboxRecord[] {
    return this.#rows.list().map(asRecord)
  }

  static status (r: SandboxRecord): SandboxStatus {
    if (r.keep) return 'kept'
    try { process.kill(r.ownerPid, 0); return 'active' } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'EPERM' ? 'active' : 'orphaned'
    }
  }
}

/** Rows are written only through add(), from a SandboxRecord: the tier is one of ours. */
function asRecord (r: SandboxRow): SandboxRecord {
  return { ...r, tier: r.tier as Tier }
}
