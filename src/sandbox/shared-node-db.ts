/**
 * One node-database connection per home for all the sandboxes this
 * process holds. Each sandbox used to open its own (open, chmod, three
 * pragmas and the schema check per create; three fds and a WAL index
 * mapping per held sandbox: 7,200 fds at 2,400 sandboxes). The connection
 * is closed when the last sandbox that uses it lets go.
 *
 * May import: src/state/.
 */
import { resolve } from 'node:path'
import { openNodeDb, type NodeDb } from '../state/node-db.js'

const open = new Map<string, { db: NodeDb, users: number }>()

export interface NodeDbLease {
  readonly db: NodeDb
  /** Let go of the connection; the last release closes it. Idempotent. Sync. */
  release: () => void
}

/** Lease the node database of `home`, opening it if no lease is out. Sync; throws as openNodeDb does. */
export function leaseNodeDb (home: string): NodeDbLease {
  const key = resolve(home)
  let entry = open.get(key)
  if (entry === undefined) {
    entry = { db: openNodeDb(key), users: 0 }
    open.set(key, entry)
  }
  entry.users++
  const held = entry
  let released = false
  return {
    db: held.db,
    release: () => {
      if (released) return
      released = true
      if (--held.users === 0) {
        open.delete(key)
        held.db.close()
      }
    }
  }
}
