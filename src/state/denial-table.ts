/**
 * The `sandbox_denials` and `sandbox_denial_counts` tables: every attempt a
 * sandbox's walls refused (src/runtime/seccomp/denial-supervisor.ts), for
 * `layerctl events` and the `layerd_sandbox_denials_total` metric, readable
 * by any process on the node (the sandbox's owner writes, layerd and the
 * CLI read).
 *
 * Bounded: the newest {@link MAX_DENIAL_ROWS} rows are kept (older ones are
 * deleted as new ones come, in steps, so an insert rarely pays for the
 * trim). The counts are never trimmed: the metric stays monotonic, and
 * events a supervisor dropped (rate limit) count there under hook `dropped`.
 *
 * May import: this folder.
 */
import type { NodeDb } from './node-db.js'

export const MAX_DENIAL_ROWS = 10_000
const TRIM_EVERY = 256

export interface DenialRow {
  seq: number
  time: string
  sandbox: string
  image: string
  tier: string
  hook: string
  object: string
  comm: string
  pid: number
  args: string[]
}

interface Sql extends Omit<DenialRow, 'args'> { args: string }

export interface DenialCount { hook: string, tier: string, recorded: number, dropped: number }

export class DenialTable {
  readonly #db: NodeDb
  #inserts = 0

  constructor (db: NodeDb) { this.#db = db }

  /** Append one; returns its seq. Sync. */
  add (r: Omit<DenialRow, 'seq'>): number {
    const info = this.#db.transaction(() => {
      const res = this.#db.prepare('INSERT INTO sandbox_denials (time, sandbox, image, tier, hook, object, comm, pid, args) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)')
        .run(r.time, r.sandbox, r.image, r.tier, r.hook, r.object, r.comm, r.pid, JSON.stringify(r.args))
      this.#count(r.hook, r.tier, 1, 0)
      return res
    })()
    if (++this.#inserts % TRIM_EVERY === 0) this.trim()
    return Number(info.lastInsertRowid)
  }

  /** Count events that were not recorded. Sync. */
  addDropped (tier: string, n: number): void {
    this.#count('dropped', tier, 0, n)
  }

  /** Rows with seq > `after`, oldest first, at most `limit`; only `sandbox`'s when given. Sync. */
  list (o: { after?: number, sandbox?: string, limit?: number } = {}): DenialRow[] {
    const rows = (o.sandbox === undefined
      ? this.#db.prepare('SELECT * FROM sandbox_denials WHERE seq > ? ORDER BY seq LIMIT ?').all(o.after ?? 0, o.limit ?? MAX_DENIAL_ROWS)
      : this.#db.prepare('SELECT * FROM sandbox_denials WHERE sandbox = ? AND seq > ? ORDER BY seq LIMIT ?').all(o.sandbox, o.after ?? 0, o.limit ?? MAX_DENIAL_ROWS)) as Sql[]
    return rows.map(r => ({ ...r, args: JSON.parse(r.args) as string[] }))
  }

  /** The highest seq so far (0 for none). Sync. */
  lastSeq (): number {
    return (this.#db.prepare('SELECT COALESCE(MAX(seq), 0) AS n FROM sandbox_denials').get() as { n: number }).n
  }

  /** Counts per hook and tier since the database was made. Sync. */
  counts (): DenialCount[] {
    return this.#db.prepare('SELECT hook, tier, recorded, dropped FROM sandbox_denial_counts ORDER BY hook, tier').all() as DenialCount[]
  }

  /** Keep the newest MAX_DENIAL_ROWS rows. Sync. */
  trim (): void {
    this.#db.prepare('DELETE FROM sandbox_denials WHERE seq <= (SELECT MAX(seq) FROM sandbox_denials) - ?').run(MAX_DENIAL_ROWS)
  }

  #count (hook: string, tier: string, recorded: number, dropped: number): void {
    this.#db.prepare(`INSERT INTO sandbox_denial_counts VALUES (?, ?, ?, ?)
      ON CONFLICT (hook, tier) DO UPDATE SET recorded = recorded + excluded.recorded, dropped = dropped + excluded.dropped`).run(hook, tier, recorded, dropped)
  }
}
