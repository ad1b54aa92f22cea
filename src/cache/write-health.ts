/**
 * CacheWriteHealth: whether the cache can write right now, and what to do
 * while it cannot. A cache is best-effort: a full disk (ENOSPC, EDQUOT,
 * lmdb's MDB_MAP_FULL), an I/O error (EIO) or a read-only remount (EROFS)
 * must never fail a read. While writes fail:
 *
 * - readers are served from verified bytes as before; new entries are not
 *   written (counted as `skippedWrites`), except one probe entry per probe
 *   interval, which goes with the next batch;
 * - the cause is logged once when the episode starts (and once when it
 *   ends), not once per chunk;
 * - every failed commit counts in `writeFailures`;
 * - the probe interval doubles after each failed probe, from
 *   `probeIntervalMs` up to `maxProbeIntervalMs`, so a disk that stays full
 *   costs a failed commit every half minute at most;
 * - the first commit that succeeds ends the episode: every entry is written
 *   again.
 *
 * The owner (the lmdb cache) reports each commit's outcome and asks
 * `admit()` before each new entry; freeing room (evicting harder) is its job.
 *
 * May import: nothing from the project.
 */

export interface CacheWriteHealthOptions {
  /** Named in log lines (the cache directory). */
  location: string
  log: LogLine
  /** First wait between probes while writes fail. Default 1,000. */
  probeIntervalMs?: number
  /** Longest wait between probes. Default 30,000. */
  maxProbeIntervalMs?: number
  clock?: () => number
}

export interface CacheWriteHealthStats {
  /** Commits (batches, evictions, access-time saves) that failed. */
  writeFailures: number
  /** New entries not written because writes were failing (their chunks were still served). */
  skippedWrites: number
  /** Whether writes are failing now. */
  writesFailing: boolean
}

export const DEFAULT_PROBE_INTERVAL_MS = 1_000
export const DEFAULT_MAX_PROBE_INTERVAL_MS = 30_000

export class CacheWriteHealth {
  readonly #location: string
  readonly #log: LogLine
  readonly #clock: () => number
  readonly #firstIntervalMs: number
  readonly #maxIntervalMs: number
  #failingSince: number | undefined
  #intervalMs: number
  #nextProbeAt = 0
  #writeFailures = 0
  #skippedWrites = 0
  #skippedThisEpisode = 0

  constructor (options: CacheWriteHealthOptions) {
    this.#location = options.location
    this.#log = options.log
    this.#clock = options.clock ?? Date.now
    this.#firstIntervalMs = options.probeIntervalMs ?? DEFAULT_PROBE_INTERVAL_MS
    this.#maxIntervalMs = options.maxProbeIntervalMs ?? DEFAULT_MAX_PROBE_INTERVAL_MS
    this.#intervalMs = this.#firstIntervalMs
  }

  get failing (): boolean { return this.#failingSince !== undefined }

  /** Whether a new entry should be written: always while writes work; while they fail, one probe per interval. Sync. */
  admit (): boolean {
    if (this.#failingSince === undefined) return true
    const now = this.#clock()
    if (now >= this.#nextProbeAt) {
      this.#nextProbeAt = now + this.#intervalMs
      return true
    }
    this.#skippedWrites++
    this.#skippedThisEpisode++
    return false
  }

  /** A commit failed with `err`. Returns true when this starts an episode (the caller evicts harder). Sync. */
  failed (err: unknown): boolean {
    this.#writeFailures++
    const now = this.#clock()
    if (this.#failingSince !== undefined) {
      this.#intervalMs = Math.min(this.#maxIntervalMs, this.#intervalMs * 2)
      this.#nextProbeAt = now + this.#intervalMs
      return false
    }
    this.#failingSince = now
    this.#intervalMs = this.#firstIntervalMs
    this.#nextProbeAt = now + this.#intervalMs
    this.#skippedThisEpisode = 0
    this.#log(`chunk cache ${this.#location} cannot write (${describeWriteFailure(err)}): serving chunks without caching them, evicting, and trying again every ${this.#intervalMs / 1000} s or more`, 'warn')
    return true
  }

  /** A commit succeeded: ends an episode if one was running. Sync. */
  succeeded (): void {
    if (this.#failingSince === undefined) return
    const seconds = ((this.#clock() - this.#failingSince) / 1000).toFixed(1)
    this.#log(`chunk cache ${this.#location} writes again after ${seconds} s: caching resumed (${this.#skippedThisEpisode} entries were served without caching meanwhile)`)
    this.#failingSince = undefined
    this.#intervalMs = this.#firstIntervalMs
  }

  stats (): CacheWriteHealthStats {
    return { writeFailures: this.#writeFailures, skippedWrites: this.#skippedWrites, writesFailing: this.failing }
  }
}

/** One line: the errno code (or lmdb's condition) and the message, causes included. */
export function describeWriteFailure (err: unknown): string {
  const parts: string[] = []
  let e: unknown = err
  for (let depth = 0; e !== undefined && depth < 4; depth++) {
    if (e instanceof Error) {
      const code = (e as NodeJS.ErrnoException).code
      parts.push(typeof code === 'string' && !e.message.includes(code) ? `${code}: ${e.message}` : e.message)
      e = e.cause
    } else { parts.push(String(e)); break }
  }
  return parts.join(': ')
}

import type { LogLine } from '../log-line.js'