/**
 * A sandboxed command's stdout or stderr, collected up to a cap: what
 * exec() returns (the process tiers' exec-runner and the VM agent channel).
 * Bytes past the cap are dropped and `truncated` says so.
 *
 * May import: node built-ins.
 */

export class CappedBuffer {
  readonly #chunks: Buffer[] = []
  #size = 0
  /** Some bytes were dropped at the cap. */
  truncated = false

  /** `copy`: keep a copy of each pushed chunk (for chunks that are views of a reused buffer). */
  constructor (readonly max: number, private readonly copy = false) {}

  /** Append what fits of `c`. Sync. */
  push (c: Buffer): void {
    const room = this.max - this.#size
    if (room <= 0) { this.truncated ||= c.length > 0; return }
    const part = c.length > room ? c.subarray(0, room) : c
    if (part.length < c.length) this.truncated = true
    this.#chunks.push(this.copy ? Buffer.from(part) : part)
    this.#size += part.length
  }

  /** Everything kept, in one new Buffer. */
  get value (): Buffer { return Buffer.concat(this.#chunks) }
}
