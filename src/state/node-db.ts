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
import type BetterSqlite3 from 'better-sqlite3'
import { createRequire } from 'node:module'
import { chmodSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'

/**
 * The node's home: traversable by everyone (0711: sandboxes run as the
 * image's users must reach their root below it), listable by root only.
 * What is in it protects itself: the control socket and pid file are 0600,
 * the database 0600, the cache directory 0700. Sync.
 */
export function ensureHomeDir (home: string): void {
  mkdirSync(home, { recursive: true, mode: 0o711 })
  chmodSync(home, 0o711)
}

export type NodeDb = BetterSqlite3.Database

const requireCjs = createRequire(import.meta.url)
let sqlite: typeof BetterSqlite3 | undefined

/**
 * Open a better-sqlite3 database, loading the native addon on first use:
 * most layerctl commands (mount, stats, run…) only talk to layerd, and a
 * push's workers read the dedup index only when there is one. Sync.
 */
export function openSqlite (file: string, options?: BetterSqlite3.Options): NodeDb {
  sqlite ??= requireCjs('better-sqlite3') as typeof BetterSqlite3
  return new sqlite(file, options)
}

const BUSY_TIMEOUT_MS = 10_000

/** Open (creating) `<home>/state.db`. Sync. */
export function openNodeDb (home: string): NodeDb {
  ensureHomeDir(home)
  const file = join(home, 'state.db')
  const db = openSqlite(file)
  chmodSync(file, 0o600)
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = NORMAL')
  db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`)
  return db
}

/** An in-memory database for tests and one-off commands. */
export function openMemoryNodeDb (): NodeDb {
  return openSqlite(':memory:')
}
