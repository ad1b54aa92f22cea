/**
 * ReadAhead: pull a byte stream ahead of its consumer, up to a bound.
 *
 * A layer downloading from a registry is converted as it arrives; the next
 * layers download meanwhile, each into a ReadAhead that holds at most
 * `maxBufferedBytes` not yet taken by its consumer, and stops pulling (TCP
 * backpressure does the rest) until the consumer takes some.
 *
 * May import: nothing from the project.
 */

export class ReadAhead {
  readonly #open: () => AsyncIterable<Uint8Array>
  readonly #maxBufferedBytes: number
  readonly #queue: Uint8Array[] = []
  #bufferedBytes = 0
  #started = false
  #finished = false
  #cancelled = false
  #consumed = false
  #error: unknown
  #wakeConsumer: (() => void) | undefined
  #wakeProducer: (() => void) | undefined
  #settled!: () => void
  /** Resolves when the source is exhausted, failed or was cancelled. */
  readonly finished: Promise<void>
  /** Called once the consumer has finished with this stream (read to the end, failed or abandoned). */
  onReleased: (() => void) | undefined

  /** `open` is called once, by start() or by the first iteration. */
  constructor (open: () => AsyncIterable<Uint8Array>, maxBufferedBytes: number) {
    this.#open = open
    this.#maxBufferedBytes = maxBufferedBytes
    this.finished = new Promise(resolve => { this.#settled = resolve })
  }

  get started (): boolean { return this.#started }
  /** The consumer is done with it (or it was cancelled): it holds no memory and pulls nothing. */
  get released (): boolean { return this.#consumed || this.#cancelled }

  /** Start pulling now. Sync; idempotent. */
  start (): void {
    if (this.#started) return
    this.#started = true
    void this.#pull()
  }

  /** Stop pulling and drop what is buffered. Sync; idempotent. */
  cancel (): void {
    if (this.#cancelled) return
    this.#cancelled = true
    this.#queue.length = 0
    this.#bufferedBytes = 0
    this.#wakeProducer?.()
    this.#wakeConsumer?.()
    this.#release()
  }

  /**
   * The bytes, in order, once. Async iterator: yields what is buffered, then
   * waits for more; rethrows the source's error at the point it happened.
   * Abandoning the iteration cancels the source.
   */
  async * [Symbol.asyncIterator] (): AsyncGenerator<Uint8Array> {
    this.start()
    try {
      for (;;) {
        const chunk = this.#queue.shift()
        if (chunk !== undefined) {
          this.#bufferedBytes -= chunk.length
          this.#wakeProducer?.()
          yield chunk
          continue
        }
        if (this.#error !== undefined) throw this.#error
        if (this.#finished || this.#cancelled) return
        await new Promise<void>(resolve => { this.#wakeConsumer = resolve })
        this.#wakeConsumer = undefined
      }
    } finally {
      if (!this.#finished) this.cancel()
      this.#consumed = true
      this.#release()
    }
  }

  #released = false
  #release (): void {
    if (this.#released) return
    this.#released = true
    this.onReleased?.()
  }

  async #pull (): Promise<void> {
    try {
      for await (const chunk of this.#open()) {
        if (this.#cancelled) break
        this.#queue.push(chunk)
        this.#bufferedBytes += chunk.length
        this.#wakeConsumer?.()
        while (this.#bufferedBytes >= this.#maxBufferedBytes && !this.#cancelled) {
          await new Promise<void>(resolve => { this.#wakeProducer = resolve })
          this.#wakeProducer = undefined
        }
        if (this.#cancelled) break
      }
    } catch (err) {
      this.#error = err
    } finally {
      this.#finished = true
      this.#wakeConsumer?.()
      this.#settled()
    }
  }
}

/**
 * Keeps at most `window` ReadAheads in flight (started and not yet released
 * by their consumer), starting them in plan order. Memory bound:
 * `window × maxBufferedBytes` of stored bytes not yet consumed.
 */
export class ReadAheadWindow {
  readonly #streams: ReadAhead[]
  readonly #window: number
  #plan: number[] = []

  constructor (streams: ReadAhead[], window: number) {
    this.#streams = streams
    this.#window = window
    for (const s of streams) s.onReleased = () => this.#fill()
  }

  /** Start these streams ahead, in this order, `window` at a time. Sync. */
  plan (indexes: readonly number[]): void {
    this.#plan = [...indexes]
    this.#fill()
  }

  /** Stream `i`, started now (its consumer is about to read it). */
  take (i: number): ReadAhead {
    const s = this.#streams[i]!
    s.start()
    return s
  }

  /** Cancel every stream. Sync. */
  cancelAll (): void {
    this.#plan = []
    for (const s of this.#streams) s.cancel()
  }

  #fill (): void {
    let inFlight = this.#streams.filter(s => s.started && !s.released).length
    while (inFlight < this.#window && this.#plan.length > 0) {
      const next = this.#streams[this.#plan.shift()!]!
      if (next.started) continue
      next.start()
      inFlight++
    }
  }
}
