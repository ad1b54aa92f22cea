/**
 * What layerd does with an error nobody caught. The rule (README "Errors
 * that end layerd"):
 *
 * - An **unhandled rejection** is the failure of one piece of asynchronous
 *   work whose result nobody awaited (a background write, a timer's flush).
 *   The work is lost, but the state it touched is whatever the code left at
 *   its last await, as with any other failed request. It is logged with its
 *   stack and counted (`layerctl stats --json`: `daemon.unhandledRejections`);
 *   layerd goes on serving. Every one is a bug to fix where it started,
 *   except the few a library is known to leave behind after a failure its
 *   caller did handle (`expectRejections()`: lmdb-js's echo of a failed
 *   commit); those are counted apart and not logged.
 * - A write to the daemon's own log that fails (the log on a full disk) is
 *   dropped: losing a log line must not end the daemon.
 * - An **uncaught exception** (a synchronous throw out of an event or timer
 *   callback) stopped code halfway through a step that was meant to finish
 *   in one go, so no in-memory invariant can be trusted. It is fatal: logged
 *   with its stack, then the process exits at once with
 *   LAYERD_EXIT.FATAL (5), leaving its mounts in place so the next daemon
 *   (started by the holder, or by the next layerctl) takes them over or
 *   cleans them. Nothing is unmounted on the way out: that would break the
 *   sandboxes a takeover could have kept.
 *
 * May import: nothing from the project (the exit code is passed in).
 */

/** Unhandled rejections logged with their stack; after that, one line per this many. */
const LOGGED_WITH_STACK = 100
const LOG_EVERY_AFTER = 1000

let unhandledRejections = 0
let expectedRejections = 0
let installed = false
const expected: Array<(reason: unknown) => boolean> = []

/** Unhandled rejections seen by this process so far (not counting expected ones). */
export function unhandledRejectionCount (): number { return unhandledRejections }

/** Rejections left behind by a library after a failure that was handled (see the module doc). */
export function expectedRejectionCount (): number { return expectedRejections }

/** Treat rejections for which `isExpected(reason)` holds as known library leftovers: counted, not logged. Sync; never throws. */
export function expectRejections (isExpected: (reason: unknown) => boolean): void {
  if (!expected.includes(isExpected)) expected.push(isExpected)
}

/**
 * Install the two process handlers (once per process; later calls do
 * nothing). `log` must write synchronously (stderr to a file or pipe does),
 * so the cause is on disk before a fatal exit.
 */
export function installProcessGuards (log: LogLine, fatalExitCode: number): void {
  if (installed) return
  installed = true
  // A log write that fails (EIO, ENOSPC on the log's disk) emits 'error': drop it.
  process.stderr.on('error', () => {})
  process.stdout.on('error', () => {})
  process.on('unhandledRejection', reason => {
    if (expected.some(isExpected => { try { return isExpected(reason) } catch { return false } })) { expectedRejections++; return }
    unhandledRejections++
    if (unhandledRejections <= LOGGED_WITH_STACK) {
      log(`unhandled rejection #${unhandledRejections} (a bug; layerd goes on serving): ${describe(reason)}`, 'warn')
    } else if (unhandledRejections % LOG_EVERY_AFTER === 0) {
      log(`${unhandledRejections} unhandled rejections so far; the latest: ${describe(reason).split('\n')[0] ?? ''}`, 'warn')
    }
  })
  process.on('uncaughtException', (err, origin) => {
    try { log(`fatal: ${origin === 'uncaughtException' ? 'uncaught exception' : origin}, exiting with code ${fatalExitCode}: ${describe(err)}`, 'error') } finally {
      process.exit(fatalExitCode)
    }
  })
}

function describe (reason: unknown): string {
  if (reason instanceof Error) {
    let text = reason.stack ?? `${reason.name}: ${reason.message}`
    let cause: unknown = reason.cause
    for (let depth = 0; cause !== undefined && depth < 4; depth++) {
      text += `\n  caused by: ${cause instanceof Error ? (cause.stack ?? cause.message) : String(cause)}`
      cause = cause instanceof Error ? cause.cause : undefined
    }
    return text
  }
  try { return `a non-Error value: ${String(reason)}` } catch { return 'a non-Error value' }
}

import type { LogLine } from '../../log-line.js'