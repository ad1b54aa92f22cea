/**
 * The `containerd_snapshots` table: the containerd snapshotter's metadata
 * (src/snapshotter/ gives it meaning), one row per snapshot; a repository
 * over the node database (schema.ts). A snapshot's directory is
 * `<root>/snapshots/<id>`; Commit renames the key and keeps the id, so an
 * unpacked layer is never copied. A remote snapshot records the layer
 * chain (bottom first) its FUSE mount shows, and the store it is in.
 *
 * All writes are single statements or transactions: a crash leaves either
 * the old row or the new one.
 *
 * May import: src/format/ (types), this folder.
 */
import type { NodeDb } from './node-db.js'
import type { Digest } from '../format/digest.js'

export type SnapshotKind = 'active' | 'view' | 'committed'

/** Where a remote snapshot's layers are: a store and the chain of layer TOCs its mount merges. */
export interface RemoteChain { store: string, s3Endpoint?: string, layers: Digest[] }

export interface SnapshotRecord {
  id: number
  key: string
  parent: string
  kind: SnapshotKind
  labels: Record<string, string>
  createdAt: Date
  updatedAt: Date
  remote?: RemoteChain
}

interface Row { id: number, key: string, parent: string, kind: SnapshotKind, labels: string, created_at: string, updated_at: string, remote: string | null }

function fromRow (r: Row): SnapshotRecord {
  return {
    id: r.id,
    key: r.key,
    parent: r.parent,
    kind: r.kind,
    labels: JSON.parse(r.labels) as Record<string, string>,
    createdAt: new Date(r.created_at),
    updatedAt: new Date(r.updated_at),
    ...(r.remote === null ? {} : { remote: JSON.parse(r.remote) as RemoteChain })
  }
}

export class ContainerdSnapshotTable {
  readonly #db: NodeDb

  constructor (db: NodeDb) { this.#db = db }

  /** The snapshot with `key`, or undefined. Sync. */
  get (key: string): SnapshotRecord | undefined {
    const row = this.#db.prepare('SELECT * FROM containerd_snapshots WHERE key = ?').get(key) as Row | undefined
    return row === undefined ? undefined : fromRow(row)
  }

  /** Every snapshot, oldest first. Sync. */
  all (): SnapshotRecord[] {
    return (this.#db.prepare('SELECT * FROM containerd_snapshots ORDER BY id').all() as Row[]).map(fromRow)
  }

  /** How many snapshots name `key` as their parent. Sync. */
  children (key: string): number {
    return (this.#db.prepare('SELECT count(*) AS n FROM containerd_snapshots WHERE parent = ?').get(key) as { n: number }).n
  }

  /**
   * Insert a snapshot and run `prepare(id)` (make its directory) in one
   * transaction: if `prepare` throws, no row remains. Sync; the caller
   * checks that `key` is free first (UNIQUE still guards a race).
   */
  insert (r: Omit<SnapshotRecord, 'id' | 'createdAt' | 'updatedAt'>, prepare: (id: number) => void): SnapshotRecord {
    const now = new Date()
    const run = this.#db.transaction(() => {
      const info = this.#db.prepare('INSERT INTO containerd_snapshots (key, parent, kind, labels, created_at, updated_at, remote) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run(r.key, r.parent, r.kind, JSON.stringify(r.labels), now.toISOString(), now.toISOString(), r.remote === undefined ? null : JSON.stringify(r.remote))
      const id = Number(info.lastInsertRowid)
      prepare(id)
      return id
    })
    return { ...r, id: run(), createdAt: now, updatedAt: now }
  }

  /** Turn active snapshot `key` into committed `name` with `labels`. Sync. */
  commit (key: string, name: string, labels: Record<string, string>): void {
    this.#db.prepare("UPDATE containerd_snapshots SET key = ?, kind = 'committed', labels = ?, updated_at = ? WHERE key = ?")
      .run(name, JSON.stringify(labels), new Date().toISOString(), key)
  }

  /** Replace the labels of `key`. Sync. */
  setLabels (key: string, labels: Record<string, string>): void {
    this.#db.prepare('UPDATE containerd_snapshots SET labels = ?, updated_at = ? WHERE key = ?').run(JSON.stringify(labels), new Date().toISOString(), key)
  }

  /** Forget `key`. Sync. */
  delete (key: string): void {
    this.#db.prepare('DELETE FROM containerd_snapshots WHERE key = ?').run(key)
  }
}
