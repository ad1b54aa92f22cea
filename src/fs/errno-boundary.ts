/**
 * The one place where errors become errno values for the kernel. Every FUSE
 * op that can fail passes its error here (fuse-ops.ts); nothing else maps
 * errors, and no op throws into the binding.
 *
 * - NotFoundError → ENOENT (not logged: a normal answer), except on read:
 *   content the image names but the store lacks is EIO, logged.
 * - CorruptObjectError → EIO, counted, logged: the chunk was refused, never served.
 * - StoreUnavailableError → EIO, logged with the store and the chunk.
 * - CacheIoError → EIO, logged as a failure of the node's cache (not the store's).
 * - A Node system error (`code` such as 'EACCES') → that errno.
 * - Any other LayerdError (the store refused access: UsageError…) → EIO, logged.
 * - Anything else, InternalError included, is a bug → EIO, logged with its
 *   stack and its cause's.
 *
 * Values come from `os.constants.errno`, negated (the binding's convention).
 * Log lines are rate-limited so a dead store cannot flood the log.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { constants as osConstants } from 'node:os'
import { CacheIoError, CorruptObjectError, InternalError, LayerdError, NotFoundError, StoreUnavailableError, UnsupportedError, describeError } from '../errors.js'
import type { LogLine } from '../log-line.js'

const ERRNO = osConstants.errno as Record<string, number>
const { EIO, ENOENT, ENOTSUP } = osConstants.errno

/** Most log lines per window; the rest are counted and reported once. */
export const LOG_BURST_LINES = 20
export const LOG_WINDOW_MS = 10_000

export interface FsErrorCounters {
  /** Chunks refused because their bytes did not match their digest. */
  corruptChunks: number
  /** Ops answered EIO for any reason. */
  ioErrors: number
}

export interface ErrnoBoundaryOptions {
  log: LogLine
  /** Where chunks come from, named in store failures. */
  storeName: string
  /** Names the mount in log lines. */
  mountpoint: string
}

export class ErrnoBoundary {
  readonly counters: FsErrorCounters = { corruptChunks: 0, ioErrors: 0 }
  readonly #options: ErrnoBoundaryOptions
  #windowStart = 0
  #linesInWindow = 0
  #suppressed = 0

  constructor (options: ErrnoBoundaryOptions) {
    this.#options = options
  }

  /**
   * The negative errno for `err`, raised by `op` on `path`. `detail` (for
   * example the chunks a read was waiting for) goes into the log line.
   * Never throws.
   */
  errno (err: unknown, op: string, path: string, detail?: string): number {
    try {
      return this.#classify(err, op, path, detail)
    } catch {
      return -EIO
    }
  }

  #classify (err: unknown, op: string, path: string, detail: string | undefined): number {
    if (err instanceof NotFoundError && op !== 'read') return -ENOENT
    const where = `${op} ${JSON.stringify(path)} on ${this.#options.mountpoint}${detail === undefined ? '' : ` (${detail})`}`
    if (err instanceof CorruptObjectError) {
      this.counters.corruptChunks++
      this.counters.ioErrors++
      this.#log(`EIO: ${where}: corrupt data refused: ${describeError(err)}`)
      return -EIO
    }
    if (err instanceof StoreUnavailableError) {
      this.counters.ioErrors++
      this.#log(`EIO: ${where}: store ${this.#options.storeName} unavailable: ${describeError(err)}`)
      return -EIO
    }
    if (err instanceof NotFoundError) {
      this.counters.ioErrors++
      this.#log(`EIO: ${where}: missing from store ${this.#options.storeName}: ${describeError(err)}`)
      return -EIO
    }
    if (err instanceof UnsupportedError) {
      this.#log(`ENOTSUP: ${where}: ${describeError(err)}`)
      return -ENOTSUP
    }
    if (err instanceof CacheIoError) {
      this.counters.ioErrors++
      this.#log(`EIO: ${where}: the node's chunk cache failed: ${describeError(err)}`)
      return -EIO
    }
    if (err instanceof LayerdError && !(err instanceof InternalError)) {
      this.counters.ioErrors++
      this.#log(`EIO: ${where}: ${describeError(err)}`)
      return -EIO
    }
    const code = (err as { code?: unknown } | null)?.code
    if (typeof code === 'string' && code.startsWith('E') && ERRNO[code] !== undefined) {
      const n = ERRNO[code]!
      if (n === EIO) this.counters.ioErrors++
      this.#log(`${code}: ${where}: ${describeError(err)}`)
      return -n
    }
    this.counters.ioErrors++
    this.#log(`EIO: ${where}: unexpected error: ${withStacks(err)}`)
    return -EIO
  }

  #log (line: string): void {
    const now = Date.now()
    if (now - this.#windowStart >= LOG_WINDOW_MS) {
      if (this.#suppressed > 0) this.#emit(`${this.#suppressed} more fs error lines suppressed on ${this.#options.mountpoint}`)
      this.#windowStart = now
      this.#linesInWindow = 0
      this.#suppressed = 0
    }
    if (this.#linesInWindow >= LOG_BURST_LINES) {
      this.#suppressed++
      return
    }
    this.#linesInWindow++
    this.#emit(line)
  }

  #emit (line: string): void {
    try { this.#options.log(line, 'warn') } catch { /* a broken logger must not break the fs */ }
  }
}

/** An error's stack, then its causes' stacks: a bug's log line keeps where it happened. */
function withStacks (err: unknown): string {
  const parts: string[] = []
  for (let e: unknown = err, depth = 0; e !== undefined && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    parts.push(e instanceof Error ? (e.stack ?? e.message) : String(e))
    if (!(e instanceof Error)) break
  }
  return parts.join('\ncaused by: ')
}
