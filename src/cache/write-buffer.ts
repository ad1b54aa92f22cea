/**
 * WriteBuffer: new cache entries held in memory for a moment, then handed
 * to the backend in one batch (one lmdb transaction), so the per-transaction
 * cost (B-tree pages copied on write, the free list, the meta page, a sync)
 * is paid once per batch instead of once per chunk. Entries are visible to
 * reads (`get`) from the moment they are added until their batch has
 * committed, so a reader never falls in the gap between the two.
 *
 * A batch goes when the oldest open entry is `delayMs` old or the open
 * entries reach `maxBytes`, or on `flush()`. Batches commit in the order
 * they were issued (the backend issues each batch's writes synchronously).
 *
 * May import: ./cache-quota.ts (types). Nothing else from the project.
 */
import type { CacheUsage, EntryKind } from './cache-quota.js'

export interface BufferedEntry {
  kind: EntryKind
  key: string
  /** Owned by the buffer (a copy of the caller's bytes). */
  bytes: Buffer
  atimeMs: number
  /** A chunk stored as its frame (stored-chunk.ts), not as plain bytes. */
  isFrame?: boolean
}

/** When a batch of open entries goes (WriteBuffer.limits). */
export interface WriteBatchLimits {
  /** Longest time an entry waits before its batch is issued (ms). */
  delayMs: number
  /** Open bytes that issue a batch at once. */
  maxBytes: number
}

export interface WriteBufferOptions extends WriteBatchLimits {
  /**
   * Store a batch. Must issue every write synchronously (before its first
   * await), so batches commit in the order they were issued. Async.
   */
  commit: (batch: BufferedEntry[]) => Promise<void>
  /** A batch failed to commit: none of its entries can be assumed stored. */
  onError: (err: unknown, batch: BufferedEntry[]) => void
}

export class WriteBuffer {
  readonly #options: WriteBufferOptions
  /** The limits a batch goes at (`limits`); the options' at first. */
  #limits: WriteBatchLimits
  /** Every entry not yet committed: open and being committed. */
  readonly #uncommitted = new Map<string, BufferedEntry>()
  #open: BufferedEntry[] = []
  #openUsage: CacheUsage = emptyUsage()
  #timer: NodeJS.Timeout | undefined
  /** When the open batch's oldest entry came (performance.now()). */
  #openedAt = 0
  /** The last batch issued; later batches commit after it. */
  #lastCommit: Promise<void> = Promise.resolve()

  constructor (options: WriteBufferOptions) {
    this.#options = options
    this.#limits = { delayMs: options.delayMs, maxBytes: options.maxBytes }
  }

  /** When a batch goes: `delayMs` after its oldest entry, or at `maxBytes` of open entries. */
  get limits (): WriteBatchLimits { return { ...this.#limits } }

  /**
   * Change when batches go (the daemon commits smaller batches sooner while
   * over its memory target: the open entries are memory held for them). The
   * open entries go at once if they are already past the new limits, else
   * their wait is cut to the new delay. Sync; throws RangeError, changing
   * nothing, on a negative or non-finite limit.
   */
  set limits (limits: WriteBatchLimits) {
    for (const [name, v] of Object.entries(limits)) {
      if (!Number.isFinite(v) || v < 0) throw new RangeError(`WriteBuffer limits: ${name} must be a finite number ≥ 0, not ${String(v)}`)
    }
    this.#limits = { delayMs: limits.delayMs, maxBytes: limits.maxBytes }
    if (this.#open.length === 0) return
    const waited = performance.now() - this.#openedAt
    if (this.#openUsage.bytes >= limits.maxBytes || waited >= limits.delayMs) { this.#issue(); return }
    clearTimeout(this.#timer)
    this.#arm(limits.delayMs - waited)
  }

  /** The uncommitted entry under `key`, or undefined. Sync. */
  get (key: string): BufferedEntry | undefined {
    return this.#uncommitted.size === 0 ? undefined : this.#uncommitted.get(key)
  }

  /** Entries not yet committed. */
  get size (): number { return this.#uncommitted.size }

  /** Usage of the entries not yet handed to the backend (what its persisted counters must leave out). */
  openUsage (): CacheUsage { return { ...this.#openUsage } }

  /** Add an entry (its bytes already owned by the buffer). Sync; a full buffer issues its batch at once. */
  add (entry: BufferedEntry): void {
    this.#uncommitted.set(entry.key, entry)
    this.#open.push(entry)
    const u = this.#openUsage
    u.bytes += entry.bytes.length
    if (entry.kind === 'chunk') u.chunks++
    else { u.metaBytes += entry.bytes.length; u.metaObjects++ }
    if (u.bytes >= this.#limits.maxBytes) this.#issue()
    else if (this.#timer === undefined) {
      this.#openedAt = performance.now()
      this.#arm(this.#limits.delayMs)
    }
  }

  /** The open batch goes in `ms`. */
  #arm (ms: number): void {
    this.#timer = setTimeout(() => this.#issue(), ms)
    this.#timer.unref()
  }

  /** Issue the open entries now and resolve once everything added so far has committed (or failed). Async; never rejects. */
  async flush (): Promise<void> {
    this.#issue()
    await this.#lastCommit
  }

  /** Issue the open batch (sync). */
  #issue (): void {
    if (this.#timer !== undefined) { clearTimeout(this.#timer); this.#timer = undefined }
    if (this.#open.length === 0) return
    const batch = this.#open
    this.#open = []
    this.#openUsage = emptyUsage()
    let committing: Promise<void>
    try {
      committing = this.#options.commit(batch)
    } catch (err) {
      committing = Promise.reject(err)
    }
    const done = committing.then(
      () => this.#forget(batch),
      (err: unknown) => { this.#forget(batch); this.#options.onError(err, batch) }
    )
    this.#lastCommit = Promise.all([this.#lastCommit, done]).then(() => {})
  }

  #forget (batch: BufferedEntry[]): void {
    for (const e of batch) if (this.#uncommitted.get(e.key) === e) this.#uncommitted.delete(e.key)
  }
}

function emptyUsage (): CacheUsage {
  return { bytes: 0, chunks: 0, metaBytes: 0, metaObjects: 0 }
}
