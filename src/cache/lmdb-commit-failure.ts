/**
 * What an lmdb-js commit failure was, and which LayerdError it becomes.
 *
 * lmdb-js rejects each write of a failed commit with "Commit failed (see
 * commitError for details)"; its `commitError` is a promise of the real error
 * (an errno number as `code`). It also leaves one rejected promise of its own
 * behind each failed commit that nobody can await: `isLmdbCommitEcho()` names
 * it for the daemon's unhandled-rejection guard.
 *
 * May import: src/errors.ts, ./write-health.ts, node built-ins.
 */
import { constants as osConstants } from 'node:os'
import { CacheIoError, LimitExceededError, type LayerdError } from '../errors.js'
import { describeWriteFailure } from './write-health.js'

/**
 * The error behind an lmdb-js commit failure (`err` itself when it is not
 * one). Handles the `commitError` promise (it has no other handler) and
 * gives the errno its name (`code: 'ENOSPC'`, `errno: -28`). Async; never rejects.
 */
export async function lmdbCommitCause (err: unknown): Promise<unknown> {
  const pending = (err as { commitError?: Promise<unknown> } | undefined)?.commitError
  if (pending === undefined || typeof pending.then !== 'function') return err
  const inner = await pending.then(() => err, (e: unknown) => e)
  if (inner instanceof Error && typeof (inner as { code?: unknown }).code === 'number') {
    const errno = (inner as unknown as { code: number }).code
    const name = Object.entries(osConstants.errno).find(([, n]) => n === errno)?.[0]
    if (name !== undefined) Object.assign(inner, { code: name, errno: -errno })
  }
  return inner
}

/**
 * Whether an unhandled rejection is lmdb-js's own echo of a failed commit
 * (a promise it rejects and never hands to anyone): the commit's failure
 * reached the cache through its own write promises and was counted there.
 * Handles the echo's `commitError` promise too. Sync.
 */
export function isLmdbCommitEcho (reason: unknown): boolean {
  if (!(reason instanceof Error) || !reason.message.startsWith('Commit failed')) return false
  const pending = (reason as { commitError?: Promise<unknown> }).commitError
  if (pending === undefined || typeof pending.then !== 'function') return false
  pending.then(() => {}, () => {})
  return true
}

/**
 * The error a failed commit of the cache at `location` is reported as:
 * LimitExceededError when the disk or the map is full, CacheIoError for
 * anything else; `what` is what could not be done ("store 12 entries").
 * `cause` is lmdbCommitCause()'s answer. Sync.
 */
export function commitFailureError (location: string, what: string, cause: unknown): LayerdError {
  const msg = describeWriteFailure(cause)
  return /MDB_MAP_FULL|ENOSPC|EDQUOT|No space/i.test(msg)
    ? new LimitExceededError(`chunk cache ${location} is full: cannot ${what}: ${msg}`, { cause })
    : new CacheIoError(`chunk cache ${location} cannot ${what}: ${msg}`, { cause })
}
