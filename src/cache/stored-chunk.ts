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
 * May import: zstd-napi's binding, node built-ins.
 */
import zstd from 'zstd-napi/binding.js'

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
 * Turns stored frame values back into plain bytes. Decompresses into one
 * scratch buffer, so a result is valid only until the next decode() (the
 * cache's get() contract); the last decoded chunk is remembered, because a
 * FUSE read that ends inside a chunk is usually followed by one that starts
 * there. (Chunks are content-addressed, so a remembered chunk is never
 * stale; the caller checks that the entry still exists before it decodes.)
 */
export class StoredChunkDecoder {
  readonly #dctx = new zstd.DCtx()
  #scratch = Buffer.allocUnsafe(256 * 1024)
  #lastKey: string | undefined
  #last: Buffer | undefined
  /** Frames decompressed, and values that did not decode. */
  decompressed = 0
  failed = 0

  /** Plain bytes of chunk `key` from its stored frame value (a view; see the class doc), or undefined if it does not decode. Sync. */
  decode (key: string, stored: Uint8Array): Buffer | undefined {
    if (key === this.#lastKey && this.#last !== undefined) return this.#last
    if (stored.length < FRAME_HEADER_BYTES) { this.failed++; return undefined }
    const length = Buffer.from(stored.buffer, stored.byteOffset, stored.length).readUInt32LE(0)
    if (length > this.#scratch.length) this.#scratch = Buffer.allocUnsafe(length)
    const out = this.#scratch.subarray(0, length)
    this.#lastKey = undefined
    let n: number
    try { n = this.#dctx.decompress(out, stored.subarray(FRAME_HEADER_BYTES)) } catch { this.failed++; return undefined }
    if (n !== length) { this.failed++; return undefined }
    this.decompressed++
    this.#lastKey = key
    this.#last = out
    return out
  }
}
