/**
 * The node-local database (better-sqlite3): rebuildable state that speeds a
 * node up but is never authoritative — the dedup index, mounts, access
 * traces, sandboxes. (Cache accounting lives in the lmdb cache itself.)
 * Its tables are defined once, in schema.ts, with a version; opening a
 * database migrates it. Modules use it through the repository classes of
 * this folder (one per table), never with SQL of their own.
 *
 * One file per LAYERD_HOME, WAL mode, so the CLI and the daemon can both use it.
 *
 * May import: src/errors.ts, this folder.
 */
import type BetterSqlite3 from 'better-sqlite3'
import { createRequire } from 'node:module'
import { chmodSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { migrate } from './schema.js'

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

declare const migrated: unique symbol

/** A node database at this build's schema version: only openNodeDb() and openMemoryNodeDb() make one. */
export type NodeDb = BetterSqlite3.Database & { readonly [migrated]: true }

const requireCjs = createRequire(import.meta.url)
let sqlite: typeof BetterSqlite3 | undefined

/**
 * Open a better-sqlite3 database, loading the native addon on first use:
 * most layerctl commands (mount, stats, run…) only talk to layerd, and a
 * push's workers read the dedup index only when there is one. Sync.
 */
export function openSqlite (file: string, options?: BetterSqlite3.Options): BetterSqlite3.Database {
  sqlite ??= requireCjs('better-sqlite3') as typeof BetterSqlite3
  return new sqlite(file, options)
}

const BUSY_TIMEOUT_MS = 10_000

/**
 * Open (creating) `<home>/state.db` and bring it to this build's schema
 * (schema.ts). Sync. Throws StateTooNewError, naming the file, when a newer
 * build wrote it; the handle is closed then.
 */
export function openNodeDb (home: string): NodeDb {
  ensureHomeDir(home)
  const file = join(home, 'state.db')
  const db = openSqlite(file)
  try {
    chmodSync(file, 0o600)
    db.pragma('journal_mode = WAL')
    db.pragma('synchronous = NORMAL')
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`)
    migrate(db, file)
  } catch (err) {
    db.close()
    throw err
  }
  return db as NodeDb
}

/** An in-memory database at this build's schema, for tests and one-off commands. Sync. */
export function openMemoryNodeDb (): NodeDb {
  const db = openSqlite(':memory:')
  migrate(db, 'in memory')
  return db as NodeDb
}
