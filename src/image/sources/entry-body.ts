/**
 * EntryBody: the content of one tar-stream entry as an AsyncIterable, safe to
 * abandon.
 *
 * tar-stream's own entry iterator destroys the entry stream when a consumer
 * stops early, and destroying an entry destroys the whole extract. This
 * wrapper never destroys: it buffers at most a few chunks (pausing the entry
 * stream), and `drain()` discards whatever the consumer did not read, so the
 * next entry can always be reached. It also checks that the entry delivered
 * exactly the bytes its header declared.
 *
 * May import: src/errors.ts.
 */
import { BadInputError } from '../../errors.js'

const MAX_QUEUED_CHUNKS = 4

/** What EntryBody needs of a (streamx or Node) readable stream. */
export interface PausableStream {
  on (event: 'data', listener: (chunk: Uint8Array) => void): unknown
  on (event: 'end' | 'close', listener: () => void): unknown
  on (event: 'error', listener: (err: unknown) => void): unknown
  pause (): unknown
  resume (): unknown
}

export class EntryBody implements AsyncIterable<Uint8Array> {
  readonly #stream: PausableStream
  readonly #expected: number
  readonly #label: string
  readonly #classify: (err: unknown) => Error
  #queue: Uint8Array[] = []
  #received = 0
  #ended = false
  #error: unknown
  #discard = false
  #iterated = false
  #wake: (() => void) | undefined

  /**
   * `stream` is a tar-stream entry stream declared to hold `expected` bytes;
   * `label` names the entry for messages; `classify` turns a stream failure
   * into the error the consumer should see.
   */
  constructor (stream: PausableStream, expected: number, label: string, classify: (err: unknown) => Error) {
    this.#stream = stream
    this.#expected = expected
    this.#label = label
    this.#classify = classify
    stream.on('data', (chunk: Uint8Array) => {
      this.#received += chunk.length
      if (this.#discard) return
      this.#queue.push(chunk)
      if (this.#queue.length >= MAX_QUEUED_CHUNKS) stream.pause()
      this.#notify()
    })
    stream.on('end', () => { this.#ended = true; this.#notify() })
    stream.on('error', (err: unknown) => { this.#error ??= err; this.#notify() })
    stream.on('close', () => {
      if (!this.#ended) this.#error ??= new BadInputError(`${label}: content ended early`)
      this.#notify()
    })
  }

  /** The content, in order. One pass only; buffers are owned by the caller. Throws BadInputError/LimitExceededError on a broken input. */
  async * [Symbol.asyncIterator] (): AsyncIterator<Uint8Array> {
    if (this.#iterated) throw new Error(`${this.#label}: content can be read only once`)
    this.#iterated = true
    for (;;) {
      const chunk = this.#queue.shift()
      if (chunk !== undefined) {
        if (this.#queue.length < MAX_QUEUED_CHUNKS / 2) this.#stream.resume()
        yield chunk
        continue
      }
      await this.#settled()
      if (this.#queue.length > 0) continue
      if (this.#error !== undefined) throw this.#classify(this.#error)
      this.#checkLength()
      return
    }
  }

  /** Discard the unread rest of the content and wait for its end. Async; throws like the iterator. */
  async drain (): Promise<void> {
    this.#discard = true
    this.#queue = []
    this.#stream.resume()
    while (!this.#ended && this.#error === undefined) await this.#settled()
    if (this.#error !== undefined) throw this.#classify(this.#error)
    this.#checkLength()
  }

  #checkLength (): void {
    if (this.#received !== this.#expected) {
      throw new BadInputError(`${this.#label}: content is ${this.#received} bytes but the header declares ${this.#expected}`)
    }
  }

  /** Resolves at the next event (data, end, error), or at once if there is something to act on. */
  #settled (): Promise<void> {
    if (this.#queue.length > 0 || this.#ended || this.#error !== undefined) return Promise.resolve()
    return new Promise(resolve => { this.#wake = resolve })
  }

  #notify (): void {
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }
}
