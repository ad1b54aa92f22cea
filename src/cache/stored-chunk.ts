/**
 * How the persistent cache stores a chunk whose zstd frame is smaller than
 * its plain bytes: the plain length (u32 LE), then the frame. Chunks whose
 * frame saves nothing (already compressed data) stay plain bytes.
 *
 * Why frames (README.md, "Compressed frames in the cache"): the plain bytes
 * of real images are 2.3–3x their frames, and the cache's writes are most
 * of what a layerd node writes to its disk. A hit on a frame costs a
 * decompression (tens of µs per chunk) instead of a memcpy; the kernel page
 * cache of each mount still serves repeated reads of a file without
 * reaching the daemon at all.
 *
 * A frame is stored only as the fetcher hands it over, right after it
 * decoded to the verified plain bytes, so decoding it again gives the same
 * bytes. A stored frame that no longer decodes (a damaged file) reads as a
 * miss.
 *
 * May import: ./chunk-decoder.ts (limits), zstd-napi's binding, node built-ins.
 */
import zstd from 'zstd-napi/binding.js'
import { MAX_CHUNK_BYTES } from './chunk-decoder.js'

const FRAME_HEADER_BYTES = 4

/** The stored frame value of a chunk, or undefined when storing `plain` is no bigger. Sync; returns a new buffer. */
export function encodeStoredFrame (plain: Uint8Array, frame: Uint8Array | undefined): Buffer | undefined {
  if (frame === undefined || frame.length + FRAME_HEADER_BYTES >= plain.length) return undefined
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + frame.length)
  out.writeUInt32LE(plain.length, 0)
  out.set(frame, FRAME_HEADER_BYTES)
  return out
}

/**
 * Default memory for decoded chunks kept by StoredChunkDecoder. 16 MiB: the
 * base of stacked images is read through one mount per node, so the copies
 * this saved decoding (64 MiB before stacks) are fewer; the daemon also
 * drops it all when reads stop (release()).
 */
export const DEFAULT_DECODED_CACHE_BYTES = 16 * 1024 * 1024
const SCRATCH_BYTES = 256 * 1024
/** Digests remembered as decoded once (about 100 bytes each). */
const SEEN_MAX = 65_536

/**
 * Turns stored frame values back into plain bytes, keeping the most recently
 * used decoded chunks (up to `capBytes` of plain bytes) so a hot chunk is
 * decompressed once, not on every hit. That matters on a node: the kernel
 * page cache is per mount, so every image built on one base reads the base's
 * files (python, libc, the stdlib) through the daemon again. Deploy benchmark
 * (24 images on one node): 1.3 s of the daemon's CPU went to decompressing
 * hits before this memory was added.
 *
 * A chunk is kept from its second decode on: a chunk read once (a full read
 * of a tree) is decoded into one scratch buffer, with no allocation and
 * nothing evicted for it. The digests decoded once are remembered, up to
 * SEEN_MAX of them.
 *
 * A result is read-only and valid until the next decode() (the cache's get()
 * contract). Chunks are content-addressed, so a kept chunk is never stale;
 * the caller checks that the entry still exists before it decodes.
 */
export class StoredChunkDecoder {
  readonly #dctx = new zstd.DCtx()
  #capBytes: number
  /** Insertion order is recency order: a hit moves its chunk to the end. */
  readonly #decoded = new Map<string, Buffer>()
  #decodedBytes = 0
  readonly #seen = new Set<string>()
  #scratch = Buffer.allocUnsafe(SCRATCH_BYTES)
  /** Frames decompressed, hits on decoded chunks, and values that did not decode. */
  decompressed = 0
  reused = 0
  failed = 0

  constructor (capBytes = DEFAULT_DECODED_CACHE_BYTES) {
    this.#capBytes = capBytes
  }

  /** The cap on plain bytes kept. Setting it lower evicts the least recently used chunks at once. Sync. */
  get capBytes (): number { return this.#capBytes }
  set capBytes (bytes: number) {
    this.#capBytes = bytes
    this.#evictOverCap()
  }

  #evictOverCap (): void {
    for (const [k, b] of this.#decoded) {
      if (this.#decodedBytes <= this.#capBytes) break
      this.#decoded.delete(k)
      this.#decodedBytes -= b.length
    }
  }

  /** Plain bytes kept for decoded chunks. */
  get decodedBytes (): number { return this.#decodedBytes }

  /**
   * Forget every decoded chunk and the once-decoded digests, and shrink the
   * scratch buffer back to its first size: the memory of a burst of hits
   * goes back (once garbage-collected). Sync. Results handed out before stay
   * valid for their holders; only the next decode() costs a decompression.
   */
  release (): number {
    const freed = this.#decodedBytes + Math.max(0, this.#scratch.length - SCRATCH_BYTES)
    this.#decoded.clear()
    this.#decodedBytes = 0
    this.#seen.clear()
    if (this.#scratch.length > SCRATCH_BYTES) this.#scratch = Buffer.allocUnsafe(SCRATCH_BYTES)
    return freed
  }

  /** Plain bytes of chunk `key` from its stored frame value (read-only), or undefined if it does not decode. Sync. */
  decode (key: string, stored: Uint8Array): Buffer | undefined {
    const kept = this.#decoded.get(key)
    if (kept !== undefined) {
      this.#decoded.delete(key)
      this.#decoded.set(key, kept)
      this.reused++
      return kept
    }
    if (stored.length < FRAME_HEADER_BYTES) { this.failed++; return undefined }
    const length = Buffer.from(stored.buffer, stored.byteOffset, stored.length).readUInt32LE(0)
    // A damaged length must not make us allocate: no chunk is larger than the TOC limit.
    if (length > MAX_CHUNK_BYTES) { this.failed++; return undefined }
    const keep = length <= this.#capBytes && this.#seen.delete(key)
    if (!keep && length <= this.#capBytes) {
      if (this.#seen.size >= SEEN_MAX) this.#seen.clear()
      this.#seen.add(key)
    }
    if (!keep && length > this.#scratch.length) this.#scratch = Buffer.allocUnsafe(length)
    const out = keep ? Buffer.allocUnsafe(length) : this.#scratch.subarray(0, length)
    let n: number
    try { n = this.#dctx.decompress(out, stored.subarray(FRAME_HEADER_BYTES)) } catch { this.failed++; return undefined }
    if (n !== length) { this.failed++; return undefined }
    this.decompressed++
    if (keep) {
      this.#decoded.set(key, out)
      this.#decodedBytes += length
      this.#evictOverCap()
    }
    return out
  }
}
