/**
 * StoreOutage: whether one store is answering the fetcher, and the log of
 * its outages. A store that stays away past the retry deadline fails every
 * read with StoreUnavailableError; a node reading many files would write a
 * line per failed GET, burying the one fact that matters. So the first
 * failure of an outage logs ONE line naming the store, the failures after
 * it are only counted, and the first GET answered after it logs the end of
 * the outage with that count.
 *
 * Only StoreUnavailableError opens an outage: a missing blob or a corrupt
 * chunk is about one object, not the store, and stays logged per GET.
 *
 * May import: src/errors.ts.
 */
import type { StoreUnavailableError } from '../errors.js'
import type { LogLine } from '../log-line.js'

export class StoreOutage {
  readonly #storeUrl: string
  readonly #log: LogLine
  readonly #now: () => number
  #since: number | undefined
  #failedDuring = 0
  /** Outages seen (a metric): each began with a GET failing past the retry deadline. */
  outages = 0

  constructor (storeUrl: string, log: LogLine, now: () => number = Date.now) {
    this.#storeUrl = storeUrl
    this.#log = log
    this.#now = now
  }

  /** True from a GET failing as unavailable until one is answered. */
  get down (): boolean { return this.#since !== undefined }

  /** A GET failed with `err` after its retries. Logs only when this opens an outage. */
  failed (err: StoreUnavailableError): void {
    this.#failedDuring++
    if (this.#since !== undefined) return
    this.#since = this.#now()
    this.outages++
    this.#log(`store ${this.#storeUrl} is unavailable: reads that need it fail with EIO until it answers (further failures are counted, not logged): ${err.message}`, 'warn')
  }

  /** A GET was answered. Logs the end of an outage. */
  answered (): void {
    if (this.#since === undefined) return
    const seconds = ((this.#now() - this.#since) / 1000).toFixed(1)
    this.#log(`store ${this.#storeUrl} answers again after ${seconds} s; ${this.#failedDuring} fetch${this.#failedDuring === 1 ? '' : 'es'} failed meanwhile`)
    this.#since = undefined
    this.#failedDuring = 0
  }
}
