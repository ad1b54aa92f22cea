/**
 * Chunkers: cut a byte stream into chunks, the unit of dedup, fetch and
 * verification. Chunk boundaries are part of the storage format: the same
 * bytes must always produce the same chunks, whatever piece sizes they arrive
 * in, or dedup across pushes silently stops working.
 *
 * - {@link FastCdcChunker}: content-defined chunking, FastCDC (Xia et al.,
 *   USENIX ATC 2016 and IEEE TPDS 2020): a gear rolling hash, no hashing of
 *   the first `minSize` bytes of a chunk, and normalized chunking with two
 *   masks (a harder one before `avgSize`, an easier one after) so chunk sizes
 *   cluster around `avgSize`. A chunk ends after the first byte at which the
 *   hash bits selected by the mask (the top bits) are all zero, or at `maxSize`.
 * - {@link FixedSizeChunker}: cuts every `size` bytes; for comparison.
 *
 * Both are streaming: `push()` returns the chunks completed by the new bytes
 * and keeps the scan state (position in the chunk, hash) so no byte is
 * scanned twice. A chunk that lies inside one pushed buffer is returned as a
 * zero-copy view of it; only a chunk that spans pushes is copied, once, when
 * it completes (no quadratic concatenation).
 *
 * Pure: no fs, network or native code. Imports only errors.
 */
import { UsageError } from '../errors.js'

/** Sizes for {@link FastCdcChunker}, in bytes. */
export interface FastCdcOptions {
  /** Every chunk but a stream's last is longer than this: a chunk's first minSize bytes are skipped, not hashed. At least 64. */
  minSize: number
  /** Target size: a power of two; sets the mask widths. */
  avgSize: number
  /** A cut is forced here. */
  maxSize: number
}

/**
 * The FastCDC sizes push should use, chosen by measurement (bench/chunking.ts
 * on the Debian fixture series; a run writes bench/results/chunking.md):
 * avg 32 KiB, min = avg/4, max = avg*4, restarted at every file. Part of the
 * storage format: changing it stops new pushes deduplicating against old ones.
 */
export const DEFAULT_FASTCDC_OPTIONS: Readonly<FastCdcOptions> = Object.freeze({ minSize: 8 * 1024, avgSize: 32 * 1024, maxSize: 128 * 1024 })

/** The streaming contract every chunker implements. */
export interface Chunker {
  /**
   * Feed the next bytes of the stream. Synchronous. Returns the chunks these
   * bytes complete, in order (possibly none). A returned chunk may be a view
   * of `data`: consume it (hash, compress, copy) before mutating or reusing
   * `data`. The chunker keeps views of `data` for a chunk still open, so the
   * caller must not mutate `data` until that chunk has been returned either.
   */
  push: (data: Uint8Array) => Uint8Array[]
  /**
   * End the stream: returns the last, possibly short, chunk, or undefined if
   * no bytes are pending. Resets the chunker, which may then be reused for a
   * new stream (for example the next file).
   */
  flush: () => Uint8Array | undefined
  /**
   * Copy the bytes of the open chunk into memory the chunker owns, so the
   * buffers earlier pushes passed in may be reused at once (at most maxSize
   * bytes per open chunk).
   */
  detach: () => void
}

/** Seed of the SplitMix64 generator that derives {@link GEAR_TABLE}. Changing it changes every chunk boundary. */
export const GEAR_SEED = 0x6c61796572642d31n // ASCII "layerd-1"

/**
 * The gear table: entry i is the high 32 bits of the i-th output (i = 0..255)
 * of SplitMix64 (Steele et al., 2014) seeded with {@link GEAR_SEED}, stored
 * as int32 so the scan loop stays in small-integer arithmetic. Pinned by a
 * digest in the tests: part of the storage format.
 */
export const GEAR_TABLE: Int32Array = makeGearTable(GEAR_SEED)

/** How many bits the normalized masks differ from log2(avgSize) (FastCDC "NC level"). */
export const FASTCDC_NORMALIZATION_LEVEL = 2

function makeGearTable (seed: bigint): Int32Array {
  const mask64 = (1n << 64n) - 1n
  const table = new Int32Array(256)
  let state = seed
  for (let i = 0; i < 256; i++) {
    state = (state + 0x9e3779b97f4a7c15n) & mask64
    let z = state
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & mask64
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & mask64
    z = z ^ (z >> 31n)
    table[i] = Number(BigInt.asIntN(32, z >> 32n))
  }
  return table
}

/**
 * A mask of `bits` one-bits at the top of the 32-bit hash. The gear hash
 * shifts left, so high bits depend on the most recent 32 bytes and low bits
 * on fewer: the top bits give the widest window.
 */
function topBitsMask (bits: number): number {
  return bits <= 0 ? 0 : bits >= 32 ? -1 : (((1 << bits) - 1) << (32 - bits)) | 0
}

/**
 * FastCDC's cut search, given the chunker's state. Implementations must cut
 * byte for byte alike: JsCdcScanner is the reference; push's workers inject
 * a native one (src/image/native-cdc-scanner.ts).
 */
export interface CdcScanner {
  /**
   * The end of the open chunk in data[from..] (an index into `data`), or -1
   * when `data` ends first. `state` is [bytes of the open chunk seen so far,
   * rolling hash]: reset to [0, 0] at a cut, saved otherwise. `params` is
   * [minSize, avgSize, maxSize, maskHard, maskEasy]. Sync.
   */
  next: (data: Uint8Array, from: number, state: Int32Array, params: Int32Array) => number
}

/** The most bytes one scanForMatch call scans (see there). */
const SCAN_WINDOW_BYTES = 1024

/** FastCDC's cut search in JS: the reference CdcScanner, and the default. */
export class JsCdcScanner implements CdcScanner {
  next (data: Uint8Array, from: number, state: Int32Array, params: Int32Array): number {
    const minSize = params[0]!
    const avgSize = params[1]!
    const maxSize = params[2]!
    const n = data.length
    let position = state[0]!
    let i = from
    if (position < minSize) {
      const skip = Math.min(minSize - position, n - i)
      i += skip
      position += skip
    }
    if (position >= minSize && position < avgSize) {
      const end = i + Math.min(avgSize - position, n - i)
      const cut = this.scanRange(data, i, end, params[3]!, state)
      if (cut >= 0) return cutAt(cut, state)
      position += end - i
      i = end
    }
    if (position >= avgSize) {
      const end = i + Math.min(maxSize - position, n - i)
      const cut = this.scanRange(data, i, end, params[4]!, state)
      if (cut >= 0) return cutAt(cut, state)
      position += end - i
      if (position >= maxSize) return cutAt(end, state)
    }
    state[0] = position
    return -1
  }

  /** scanForMatch over data[start, end), SCAN_WINDOW_BYTES at a time; the hash lives in state[1]. */
  private scanRange (data: Uint8Array, start: number, end: number, mask: number, state: Int32Array): number {
    for (let from = start; from < end; from += SCAN_WINDOW_BYTES) {
      const cut = this.scanForMatch(data, from, Math.min(end, from + SCAN_WINDOW_BYTES), mask, state)
      if (cut >= 0) return cut
    }
    return -1
  }

  /**
   * Roll the gear hash over data[start, end). Returns the index just past
   * the first byte after which `(hash & mask) === 0`, or -1 with the hash
   * (state[1]) updated. Unrolled by eight: about 1.4x faster than the plain
   * loop in V8 (Node 20).
   *
   * Written for V8's optimizer. Code that has never run has no type feedback,
   * and optimized code bails out when it reaches such code. Given a long
   * range, V8 optimized this loop in the middle of its first call (on-stack
   * replacement), before any exit or the tail had run, and a push then
   * recompiled it 21 times and bailed out of it dozens more. So callers scan
   * at most SCAN_WINDOW_BYTES per call (scanRange), which runs the code after
   * the loop thousands of times before the loop is hot, and the eight exits
   * only store a constant, so the one `i + k` after the loop has feedback
   * once any exit has been taken.
   */
  private scanForMatch (data: Uint8Array, start: number, end: number, mask: number, state: Int32Array): number {
    const gear = GEAR_TABLE
    let h = state[1]!
    let i = start
    let k = 0
    for (const end8 = end - 7; i < end8; i += 8) {
      h = ((h << 1) + gear[data[i]!]!) | 0
      if ((h & mask) === 0) { k = 1; break }
      h = ((h << 1) + gear[data[i + 1]!]!) | 0
      if ((h & mask) === 0) { k = 2; break }
      h = ((h << 1) + gear[data[i + 2]!]!) | 0
      if ((h & mask) === 0) { k = 3; break }
      h = ((h << 1) + gear[data[i + 3]!]!) | 0
      if ((h & mask) === 0) { k = 4; break }
      h = ((h << 1) + gear[data[i + 4]!]!) | 0
      if ((h & mask) === 0) { k = 5; break }
      h = ((h << 1) + gear[data[i + 5]!]!) | 0
      if ((h & mask) === 0) { k = 6; break }
      h = ((h << 1) + gear[data[i + 6]!]!) | 0
      if ((h & mask) === 0) { k = 7; break }
      h = ((h << 1) + gear[data[i + 7]!]!) | 0
      if ((h & mask) === 0) { k = 8; break }
    }
    if (k !== 0) return i + k
    for (; i < end; i++) {
      h = ((h << 1) + gear[data[i]!]!) | 0
      if ((h & mask) === 0) return i + 1
    }
    state[1] = h
    return -1
  }
}

function cutAt (index: number, state: Int32Array): number {
  state[0] = 0
  state[1] = 0
  return index
}

const JS_CDC_SCANNER = new JsCdcScanner()

/** Content-defined chunker (FastCDC with normalized chunking). See the module doc. */
export class FastCdcChunker implements Chunker {
  readonly minSize: number
  readonly avgSize: number
  readonly maxSize: number
  private readonly pending = new PendingBytes()
  private readonly scanner: CdcScanner
  /** [minSize, avgSize, maxSize, maskHard, maskEasy] (CdcScanner). */
  private readonly params: Int32Array
  /** [bytes of the open chunk seen so far, rolling hash] (CdcScanner). */
  private readonly state = new Int32Array(2)

  /**
   * Throws UsageError unless 64 <= minSize < avgSize < maxSize <= 2^30 and
   * avgSize is a power of two. `scanner` finds the cuts (default: JS).
   */
  constructor (opts: FastCdcOptions, scanner: CdcScanner = JS_CDC_SCANNER) {
    const { minSize, avgSize, maxSize } = opts
    const sizes = `minSize ${minSize}, avgSize ${avgSize}, maxSize ${maxSize}`
    if (![minSize, avgSize, maxSize].every(Number.isSafeInteger)) throw new UsageError(`FastCDC sizes must be integers: ${sizes}`)
    if (!(minSize >= 64 && minSize < avgSize && avgSize < maxSize && maxSize <= 2 ** 30)) {
      throw new UsageError(`FastCDC sizes must satisfy 64 <= min < avg < max <= 1 GiB: ${sizes}`)
    }
    const bits = Math.log2(avgSize)
    if (!Number.isInteger(bits)) throw new UsageError(`FastCDC avgSize must be a power of two: ${sizes}`)
    this.minSize = minSize
    this.avgSize = avgSize
    this.maxSize = maxSize
    this.scanner = scanner
    this.params = Int32Array.of(minSize, avgSize, maxSize, topBitsMask(bits + FASTCDC_NORMALIZATION_LEVEL), topBitsMask(bits - FASTCDC_NORMALIZATION_LEVEL))
  }

  push (data: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = []
    // The scan always sees a plain Uint8Array: a Buffer here and a Uint8Array there made V8 deoptimize
    // and recompile the scan loop over and over (bench/push-throughput.ts). Chunks are still cut from `data`.
    const bytes = data.constructor === Uint8Array ? data : new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
    let start = 0
    while (start < data.length) {
      const cut = this.scanner.next(bytes, start, this.state, this.params)
      if (cut < 0) {
        this.pending.add(data.subarray(start))
        break
      }
      out.push(this.pending.take(data.subarray(start, cut)))
      start = cut
    }
    return out
  }

  flush (): Uint8Array | undefined {
    this.state.fill(0)
    return this.pending.length > 0 ? this.pending.take(new Uint8Array(0)) : undefined
  }

  detach (): void {
    this.pending.detach()
  }
}

/** Cuts every `size` bytes of the stream; the last chunk may be shorter. */
export class FixedSizeChunker implements Chunker {
  readonly size: number
  private readonly pending = new PendingBytes()

  /** Throws UsageError unless `size` is a positive safe integer. */
  constructor (size: number) {
    if (!Number.isSafeInteger(size) || size <= 0) throw new UsageError(`fixed chunk size must be a positive integer, not ${size}`)
    this.size = size
  }

  push (data: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = []
    let start = 0
    while (data.length - start >= this.size - this.pending.length) {
      const cut = start + this.size - this.pending.length
      out.push(this.pending.take(data.subarray(start, cut)))
      start = cut
    }
    if (start < data.length) this.pending.add(data.subarray(start))
    return out
  }

  flush (): Uint8Array | undefined {
    return this.pending.length > 0 ? this.pending.take(new Uint8Array(0)) : undefined
  }

  detach (): void {
    this.pending.detach()
  }
}

/**
 * All chunks of one in-memory buffer, as views of it: `push(data)` then
 * `flush()` on `chunker`, which must have no pending bytes. Synchronous.
 */
export function chunkBuffer (chunker: Chunker, data: Uint8Array): Uint8Array[] {
  const chunks = chunker.push(data)
  const last = chunker.flush()
  if (last !== undefined) chunks.push(last)
  return chunks
}

/** The bytes of the open chunk that arrived in earlier pushes, kept as views until the chunk completes. */
class PendingBytes {
  private pieces: Uint8Array[] = []
  length = 0

  add (piece: Uint8Array): void {
    if (piece.length === 0) return
    this.pieces.push(piece)
    this.length += piece.length
  }

  /** Replace the views by one owned copy. */
  detach (): void {
    if (this.length === 0) return
    const owned = new Uint8Array(this.length)
    let at = 0
    for (const p of this.pieces) { owned.set(p, at); at += p.length }
    this.pieces = [owned]
  }

  /** The pending bytes followed by `tail`, as one array; a view of `tail` when nothing is pending. Clears. */
  take (tail: Uint8Array): Uint8Array {
    if (this.length === 0) return tail
    if (tail.length === 0 && this.pieces.length === 1) {
      const only = this.pieces[0]!
      this.pieces = []
      this.length = 0
      return only
    }
    const out = new Uint8Array(this.length + tail.length)
    let at = 0
    for (const p of this.pieces) { out.set(p, at); at += p.length }
    out.set(tail, at)
    this.pieces = []
    this.length = 0
    return out
  }
}
