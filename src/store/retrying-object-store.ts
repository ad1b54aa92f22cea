/**
 * RetryingObjectStore: the one place where object-store calls are retried.
 *
 * Only StoreUnavailableError is retried (never NotFoundError,
 * CorruptObjectError or usage errors), with jittered exponential backoff,
 * a bounded number of attempts and a total deadline. The backend below makes
 * one attempt per call; its own timeouts bound each attempt, so a call
 * takes at most about `deadlineMs` plus one attempt.
 *
 * list() restarts a failed listing from the beginning and skips the keys it
 * already yielded, so callers see each key once.
 *
 * May import: src/errors.ts, ./object-store.ts.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { StoreUnavailableError } from '../errors.js'
import type { ObjectBody } from './object-body.js'
import type { ListedObject, ObjectStat, ObjectStore } from './object-store.js'

export interface RetryOptions {
  /** Attempts per call, the first included. Default 5. */
  maxAttempts?: number
  /** Backoff before the second attempt; doubles each time. Default 100 ms. */
  baseDelayMs?: number
  /** Cap on one backoff. Default 2000 ms. */
  maxDelayMs?: number
  /** No new attempt starts this long after the call began: the call gives up instead. Default 20000 ms. */
  deadlineMs?: number
  /** Called before each backoff; for logs and metrics. Must not throw. */
  onRetry?: (event: RetryEvent) => void
}

export interface RetryEvent {
  op: string
  key: string
  /** The attempt that failed, from 1. */
  attempt: number
  delayMs: number
  error: StoreUnavailableError
}

export const DEFAULT_RETRY_OPTIONS = {
  maxAttempts: 5,
  baseDelayMs: 100,
  maxDelayMs: 2_000,
  deadlineMs: 20_000
} as const

export class RetryingObjectStore implements ObjectStore {
  readonly url: string
  readonly remote: boolean
  /** The store below; calls to it are not retried. */
  readonly inner: ObjectStore
  readonly #options: Required<Omit<RetryOptions, 'onRetry'>> & Pick<RetryOptions, 'onRetry'>

  constructor (inner: ObjectStore, options: RetryOptions = {}) {
    this.inner = inner
    this.url = inner.url
    this.remote = inner.remote === true
    this.#options = {
      maxAttempts: Math.max(1, options.maxAttempts ?? DEFAULT_RETRY_OPTIONS.maxAttempts),
      baseDelayMs: options.baseDelayMs ?? DEFAULT_RETRY_OPTIONS.baseDelayMs,
      maxDelayMs: options.maxDelayMs ?? DEFAULT_RETRY_OPTIONS.maxDelayMs,
      deadlineMs: options.deadlineMs ?? DEFAULT_RETRY_OPTIONS.deadlineMs,
      onRetry: options.onRetry
    }
  }

  async get (key: string): Promise<Buffer> {
    return await this.#retry('get', key, async () => await this.inner.get(key))
  }

  async getRange (key: string, offset: number, length: number): Promise<Buffer> {
    return await this.#retry('getRange', key, async () => await this.inner.getRange(key, offset, length))
  }

  async put (key: string, data: ObjectBody): Promise<void> {
    await this.#retry('put', key, async () => { await this.inner.put(key, data) })
  }

  async stat (key: string): Promise<ObjectStat | undefined> {
    return await this.#retry('stat', key, async () => await this.inner.stat(key))
  }

  async * list (prefix: string): AsyncIterable<string> {
    yield * this.#listOnce(prefix, () => this.inner.list(prefix), key => key)
  }

  async * listObjects (prefix: string): AsyncIterable<ListedObject> {
    yield * this.#listOnce(prefix, () => this.inner.listObjects(prefix), o => o.key)
  }

  /** A listing restarted from the beginning after a retryable failure, each key yielded once. */
  async * #listOnce<T> (prefix: string, listing: () => AsyncIterable<T>, keyOf: (item: T) => string): AsyncIterable<T> {
    const yielded = new Set<string>()
    const started = Date.now()
    for (let attempt = 1; ; attempt++) {
      try {
        for await (const item of listing()) {
          const key = keyOf(item)
          if (yielded.has(key)) continue
          yielded.add(key)
          yield item
        }
        return
      } catch (err) {
        await this.#backoffOrThrow(err, 'list', prefix, attempt, started)
      }
    }
  }

  async delete (key: string): Promise<void> {
    await this.#retry('delete', key, async () => { await this.inner.delete(key) })
  }

  /** Closes the store below. Idempotent if it is. */
  async close (): Promise<void> {
    await this.inner.close()
  }

  async warm (): Promise<void> { await this.inner.warm?.() }

  async #retry<T> (op: string, key: string, attemptOnce: () => Promise<T>): Promise<T> {
    const started = Date.now()
    for (let attempt = 1; ; attempt++) {
      try {
        return await attemptOnce()
      } catch (err) {
        await this.#backoffOrThrow(err, op, key, attempt, started)
      }
    }
  }

  /** Sleeps before the next attempt, or rethrows `err` when it must not be retried. */
  async #backoffOrThrow (err: unknown, op: string, key: string, attempt: number, started: number): Promise<void> {
    if (!(err instanceof StoreUnavailableError)) throw err
    const { maxAttempts, baseDelayMs, maxDelayMs, deadlineMs, onRetry } = this.#options
    // "Equal jitter": half the exponential step, plus a random half.
    const stepMs = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1))
    const delayMs = Math.round(stepMs / 2 + Math.random() * stepMs / 2)
    const elapsedMs = Date.now() - started
    if (attempt >= maxAttempts || elapsedMs + delayMs >= deadlineMs) {
      throw new StoreUnavailableError(
        `${err.message} (gave up after ${attempt} attempt${attempt === 1 ? '' : 's'} in ${elapsedMs} ms)`,
        { cause: err })
    }
    onRetry?.({ op, key, attempt, delayMs, error: err })
    await sleep(delayMs)
  }
}
