/**
 * TarFramingGuard: walks the headers of a layer tar stream, in front of
 * tar-stream, with the strict decoder of tar-header.ts.
 *
 * tar-stream splits the stream into entries and bodies; this guard makes sure
 * it only ever sees a well-framed archive and supplies what tar-stream cannot:
 * - errors with byte offsets ("bad header checksum at offset N",
 *   "unexpected end of data inside entry X");
 * - the end-of-archive marker honoured like GNU tar and Go's archive/tar
 *   (the reader docker uses): bytes after it are not forwarded, so entries
 *   hidden behind it can never reach the image;
 * - exact header metadata (PAX uid/gid/mtime, binary xattr values, which
 *   tar-stream decodes as UTF-8) as a queue of TarMember records, one per
 *   entry tar-stream will emit, in order;
 * - sizes checked against the entry limit before any data is read.
 *
 * May import: src/errors.ts, tar-header.ts.
 */
import { BadInputError, LimitExceededError } from '../../errors.js'
import type { TarSplitBuilder } from '../../format/tar-split.js'
import { TAR_BLOCK_BYTES, TarHeaderDecoder, TarSyntaxError, paddedSize, type TarMember } from './tar-header.js'

type State =
  | { at: 'header' }
  | { at: 'extension', bytes: number, padded: number }
  /** `contentEnd`: where a recorded file's content ends (its padding, up to `end`, is kept raw). */
  | { at: 'data', member: TarMember, end: number, contentEnd?: number }
  | { at: 'trailer' }

export interface FramingOptions {
  /** The layer, for messages. */
  layerName: string
  maxEntryBytes: number
  warn: (message: string) => void
  /**
   * Records the tar split (src/format/tar-split.ts): every byte seen but
   * the content of regular files with a non-zero size (except `.wh.*`
   * markers, whose content no TOC keeps), which become holes.
   */
  split?: TarSplitBuilder
}

export class TarFramingGuard {
  readonly #opts: FramingOptions
  readonly #decoder = new TarHeaderDecoder()
  readonly #members: TarMember[] = []
  #state: State = { at: 'header' }
  /** Bytes of the stream seen so far. */
  #offset = 0
  /** Bytes of a header or extension body collected across chunks. */
  #pending: Uint8Array[] = []
  #pendingBytes = 0
  #zeroBlocks = 0
  #trailingNonZero = 0
  #endMarkerAt = -1

  constructor (opts: FramingOptions) {
    this.#opts = opts
  }

  /**
   * Account for the next chunk of the uncompressed stream and return the part
   * to forward to tar-stream (all of it until the end-of-archive marker,
   * nothing after). Sync; throws BadInputError or LimitExceededError.
   */
  push (chunk: Uint8Array): Uint8Array {
    const start = this.#offset
    let pos = 0
    let forwardEnd = chunk.length
    while (pos < chunk.length) {
      const s = this.#state
      if (s.at === 'trailer') {
        if (forwardEnd === chunk.length) forwardEnd = pos
        this.#opts.split?.raw(chunk.subarray(pos))
        for (let i = pos; i < chunk.length; i++) if (chunk[i] !== 0) this.#trailingNonZero++
        pos = chunk.length
      } else if (s.at === 'data') {
        const take = Math.min(chunk.length - pos, s.end - (start + pos))
        const split = this.#opts.split
        if (split !== undefined) {
          // Content (up to contentEnd) is a hole; padding, and the data of anything else, is kept.
          const keepFrom = s.contentEnd === undefined ? pos : Math.min(pos + take, Math.max(pos, s.contentEnd - start))
          if (keepFrom < pos + take) split.raw(chunk.subarray(keepFrom, pos + take))
        }
        pos += take
        if (start + pos === s.end) this.#state = { at: 'header' }
      } else {
        const want = s.at === 'header' ? TAR_BLOCK_BYTES : s.padded
        const take = Math.min(chunk.length - pos, want - this.#pendingBytes)
        this.#opts.split?.raw(chunk.subarray(pos, pos + take))
        this.#pending.push(chunk.subarray(pos, pos + take))
        this.#pendingBytes += take
        pos += take
        if (this.#pendingBytes === want) {
          const bytes = this.#pending.length === 1 ? this.#pending[0]! : Buffer.concat(this.#pending)
          this.#pending = []
          this.#pendingBytes = 0
          const blockOffset = start + pos - want
          if (s.at === 'header') this.#onHeader(bytes, blockOffset)
          else this.#onExtension(bytes.subarray(0, s.bytes))
          // The end-of-archive marker is forwarded (tar-stream expects it); what follows is not.
          if (this.#state.at === 'trailer') forwardEnd = pos
        }
      }
    }
    this.#offset += chunk.length
    return forwardEnd === chunk.length ? chunk : chunk.subarray(0, forwardEnd)
  }

  /**
   * The stream has ended; returns the bytes still to forward to tar-stream
   * (zero padding the input left out, else nothing). Sync; throws
   * BadInputError when it ended inside a header or an entry's data. A
   * missing end-of-archive marker, or missing padding after the last entry's
   * data, is accepted, as Go's archive/tar does (umoci writes layers that
   * way).
   */
  end (): Uint8Array {
    const s = this.#state
    const where = this.#opts.layerName
    if (s.at === 'data' && this.#offset >= s.member.dataOffset + s.member.size) {
      this.#state = { at: 'header' }
      return new Uint8Array(s.end - this.#offset)
    }
    if (s.at === 'data') {
      throw new BadInputError(`${where}: unexpected end of data at offset ${this.#offset} inside entry ${JSON.stringify(s.member.name)} (${s.member.dataOffset + s.member.size - this.#offset} of its ${s.member.size} bytes missing; truncated?)`)
    }
    if (s.at === 'extension' || this.#pendingBytes > 0) {
      throw new BadInputError(`${where}: unexpected end of data at offset ${this.#offset} inside a tar header (truncated?)`)
    }
    if (this.#trailingNonZero > 0) {
      this.#opts.warn(`${where}: ignored ${this.#trailingNonZero} non-zero bytes after the end-of-archive marker at offset ${this.#endMarkerAt} (docker ignores them too)`)
    }
    return new Uint8Array(0)
  }

  /** The next entry's header, in the order tar-stream emits entries; undefined when the guard has none queued. */
  nextMember (): TarMember | undefined {
    return this.#members.shift()
  }

  #onHeader (block: Uint8Array, offset: number): void {
    let result
    try { result = this.#decoder.header(block, offset) } catch (err) { throw this.#syntax(err) }
    if (result.kind === 'zero') {
      this.#zeroBlocks++
      if (this.#zeroBlocks === 2) { this.#state = { at: 'trailer' }; this.#endMarkerAt = offset - TAR_BLOCK_BYTES }
      return
    }
    if (this.#zeroBlocks > 0) {
      // Go's archive/tar refuses this too: one zero block is the start of the end marker.
      throw new BadInputError(`${this.#opts.layerName}: a tar header follows a zero block at offset ${offset} (corrupt or concatenated tar)`)
    }
    if (result.kind === 'extension') {
      this.#state = { at: 'extension', bytes: result.bodyBytes, padded: paddedSize(result.bodyBytes) }
      if (result.bodyBytes === 0) this.#onExtension(new Uint8Array(0))
      return
    }
    const m = result.member
    if (m.size > this.#opts.maxEntryBytes) {
      throw new LimitExceededError(`${this.#opts.layerName}: entry ${JSON.stringify(m.name)} at offset ${offset} declares ${m.size} bytes, above the limit of ${this.#opts.maxEntryBytes}`)
    }
    this.#members.push(m)
    const end = m.dataOffset + paddedSize(m.size)
    if (m.size > 0 && this.#opts.split !== undefined && m.kind === 'file' && !isMarkerName(m.name)) {
      this.#opts.split.hole(m.size)
      this.#state = { at: 'data', member: m, end, contentEnd: m.dataOffset + m.size }
    } else {
      this.#state = m.size > 0 ? { at: 'data', member: m, end } : { at: 'header' }
    }
  }

  #onExtension (body: Uint8Array): void {
    try { this.#decoder.extensionBody(body) } catch (err) { throw this.#syntax(err) }
    this.#state = { at: 'header' }
  }

  #syntax (err: unknown): Error {
    if (err instanceof TarSyntaxError) return new BadInputError(`${this.#opts.layerName}: ${err.message}`, { cause: err })
    return err as Error
  }
}

/** A `.wh.*` name (whiteout, opaque or aufs marker): no TOC entry keeps such a file's content. */
function isMarkerName (name: string): boolean {
  const trimmed = name.endsWith('/') ? name.replace(/\/+$/, '') : name
  return trimmed.slice(trimmed.lastIndexOf('/') + 1).startsWith('.wh.')
}
