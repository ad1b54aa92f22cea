/**
 * The node database's schema, in one place: an ordered list of migrations
 * and `PRAGMA user_version` recording how many of them a database has had.
 *
 * Opening a database (node-db.ts) applies the missing migrations in one
 * immediate transaction, so a CLI and a daemon opening one home at once
 * migrate it once. A database whose version is above this build's is
 * refused (StateTooNewError): an older build must not write to tables it
 * does not know.
 *
 * Adding a table or a column: append a migration (never edit or reorder
 * one that has shipped), and add or extend the table's repository class
 * in this folder. Migration 1 is the schema as it was before versions
 * existed (version 0): its `IF NOT EXISTS` lets a version-0 home that holds
 * any subset of those tables open.
 *
 * May import: src/errors.ts.
 */
import type BetterSqlite3 from 'better-sqlite3'
import { StateTooNewError } from '../errors.js'

export interface Migration {
  /** What it adds, for the log and for readers of this list. */
  description: string
  /** Sync; runs inside the migration transaction. */
  up: (db: BetterSqlite3.Database) => void
}

/** Append only. Index i brings a database from version i to i + 1. */
export const MIGRATIONS: readonly Migration[] = [
  {
    description: 'the version-0 tables: dedup index, synced blob indexes, mounts, access traces, sandboxes',
    up: db => db.exec(`
      CREATE TABLE IF NOT EXISTS chunk_index (
        store TEXT NOT NULL, digest TEXT NOT NULL, blob TEXT NOT NULL,
        offset INTEGER NOT NULL, clen INTEGER NOT NULL, len INTEGER NOT NULL,
        PRIMARY KEY (store, digest)) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS synced_blob_index (
        store TEXT NOT NULL, blob TEXT NOT NULL, PRIMARY KEY (store, blob)) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS mounts (
        mountpoint TEXT PRIMARY KEY, image TEXT NOT NULL, manifest TEXT NOT NULL,
        store TEXT NOT NULL, s3_endpoint TEXT, mounted_at TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS access_traces (
        manifest TEXT NOT NULL, seq INTEGER NOT NULL, digest TEXT NOT NULL, blob TEXT NOT NULL,
        offset INTEGER NOT NULL, clen INTEGER NOT NULL, len INTEGER NOT NULL,
        PRIMARY KEY (manifest, seq)) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS sandboxes (
        id TEXT PRIMARY KEY, tier TEXT NOT NULL, image TEXT NOT NULL, manifest TEXT NOT NULL,
        state_dir TEXT NOT NULL, created_at TEXT NOT NULL, owner_pid INTEGER NOT NULL, keep INTEGER NOT NULL);`)
  },
  {
    description: 'containerd snapshots (issue 13): the layerd snapshotter\'s metadata',
    up: db => db.exec(`
      CREATE TABLE containerd_snapshots (
        id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, parent TEXT NOT NULL,
        kind TEXT NOT NULL, labels TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, remote TEXT);
      CREATE INDEX containerd_snapshots_parent ON containerd_snapshots (parent);`)
  },
  {
    description: 'sandbox denials (issue 34): the last refused attempts, bounded, and counts per hook and tier',
    up: db => db.exec(`
      CREATE TABLE sandbox_denials (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, sandbox TEXT NOT NULL, image TEXT NOT NULL,
        tier TEXT NOT NULL, hook TEXT NOT NULL, object TEXT NOT NULL, comm TEXT NOT NULL, pid INTEGER NOT NULL, args TEXT NOT NULL);
      CREATE INDEX sandbox_denials_sandbox ON sandbox_denials (sandbox, seq);
      CREATE TABLE sandbox_denial_counts (
        hook TEXT NOT NULL, tier TEXT NOT NULL, recorded INTEGER NOT NULL, dropped INTEGER NOT NULL,
        PRIMARY KEY (hook, tier)) WITHOUT ROWID;`)
  }
]

/** The version this build writes: the number of migrations. */
export const SCHEMA_VERSION = MIGRATIONS.length

/** The database's `user_version`. Sync. */
export function schemaVersion (db: BetterSqlite3.Database): number {
  return db.pragma('user_version', { simple: true }) as number
}

/**
 * Bring `db` to SCHEMA_VERSION. Sync. `label` names the database in errors.
 * Throws StateTooNewError when `db` is newer than this build; a failing
 * migration rolls back whole (the database keeps its old version).
 * Returns the version the database had.
 */
export function migrate (db: BetterSqlite3.Database, label: string, migrations: readonly Migration[] = MIGRATIONS): number {
  const check = (version: number): void => {
    if (version > migrations.length) {
      throw new StateTooNewError(`cannot open the node state ${label}: it was written by a newer layerd (schema version ${version}; this build knows versions up to ${migrations.length}). Run that build, or move the home aside: node state is rebuildable`)
    }
  }
  const before = schemaVersion(db)
  check(before)
  if (before === migrations.length) return before
  db.transaction(() => {
    const current = schemaVersion(db) // another process may have migrated meanwhile
    check(current)
    for (let v = current; v < migrations.length; v++) migrations[v]!.up(db)
    db.pragma(`user_version = ${migrations.length}`)
  }).immediate()
  return before
}
