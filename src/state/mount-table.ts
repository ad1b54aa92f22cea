/**
 * The `mounts` table: the daemon's image mounts, so a restarted daemon can
 * clean what a killed one left and mount it again. A repository over the
 * node database (schema.ts); src/daemon/mounts/mount-manager.ts gives it meaning.
 *
 * May import: this folder.
 */
import type { NodeDb } from './node-db.js'

export interface MountRow {
  mountpoint: string
  image: string
  manifest: string
  store: string
  s3Endpoint?: string
  mountedAt: string
}

interface Sql { mountpoint: string, image: string, manifest: string, store: string, s3_endpoint: string | null, mounted_at: string }

export class MountTable {
  readonly #db: NodeDb

  constructor (db: NodeDb) { this.#db = db }

  /** Insert or replace the row of `r.mountpoint`. Sync. */
  put (r: MountRow): void {
    this.#db.prepare('INSERT OR REPLACE INTO mounts VALUES (?, ?, ?, ?, ?, ?)')
      .run(r.mountpoint, r.image, r.manifest, r.store, r.s3Endpoint ?? null, r.mountedAt)
  }

  /** Sync; no-op for an unknown mountpoint. */
  remove (mountpoint: string): void {
    this.#db.prepare('DELETE FROM mounts WHERE mountpoint = ?').run(mountpoint)
  }

  /** Every row. Sync. */
  list (): MountRow[] {
    return (this.#db.prepare('SELECT * FROM mounts').all() as Sql[]).map(r => ({
      mountpoint: r.mountpoint, image: r.image, manifest: r.manifest, store: r.store,
      ...(r.s3_endpoint === null ? {} : { s3Endpoint: r.s3_endpoint }), mountedAt: r.mounted_at
    }))
  }
}
