/**
 * The node-local database (better-sqlite3): rebuildable state that speeds a
 * node up but is never authoritative — the dedup index, mounts, cache
 * accounting, access traces. Each module creates its own tables with
 * `CREATE TABLE IF NOT EXISTS`.
 *
 * One file per LAYERD_HOME, WAL mode, so the CLI and the daemon can both use it.
 *
 * May import: nothing from the project but src/errors.ts.
 */
import Database from 'better-sqlite3'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'

export type NodeDb = Database.Database

const BUSY_TIMEOUT_MS = 10_000

/** Open (creating) `<home>/state.db`. Sync. */
export function openNodeDb (home: string): NodeDb {
  mkdirSync(home, { recursive: true, mode: 0o700 })
  const db = new Database(join(home, 'state.db'))
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = NORMAL')
  db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`)
  return db
}

/** An in-memory database for tests and one-off commands. */
export function openMemoryNodeDb (): NodeDb {
  return new Database(':memory:')
}
