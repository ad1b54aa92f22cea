/**
 * MemoryImage: layer TOCs and their chunks built in memory from a short
 * description, for the filesystem's tests and benchmarks (no store, no
 * compression unless asked for).
 *
 * Each layer's chunks are packed into one blob (`blobs`), optionally
 * compressed by an injected function, so the same image can feed the real
 * fetcher through a store.
 *
 * Content is cut into fixed-size chunks, either per file or, with
 * `stream: true`, over the concatenated content of the whole layer, so one
 * chunk can back the end of one file and the start of the next (the case
 * stream chunking produces).
 *
 * May import: src/format/.
 */
import { sha256Hex } from '../format/digest.js'
import type { ChunkLocation, ChunkSpan, LayerToc, TocEntry } from '../format/toc.js'

const ZERO_DIFF_ID = `sha256:${'0'.repeat(64)}`

/** A TOC entry without size/spans, plus its content for regular files. */
export type MemoryEntry = Omit<TocEntry, 'size' | 'spans' | 'mode' | 'uid' | 'gid' | 'mtime'> &
Partial<Pick<TocEntry, 'mode' | 'uid' | 'gid' | 'mtime'>> & { content?: Uint8Array }

export interface MemoryLayerOptions {
  /** Chunk size in bytes. */
  chunkSize: number
  /** Chunk the layer's concatenated content rather than each file. */
  stream?: boolean
}

export interface MemoryImageOptions {
  /**
   * Encode each chunk as a frame of the layer's blob (e.g. zstd `compress`),
   * so `blobs` can be put in a real store and read by the real fetcher.
   * Default: frames are the plain bytes.
   */
  compress?: (plain: Uint8Array) => Uint8Array
}

export class MemoryImage {
  /** Every chunk of every layer, by sha256 hex. */
  readonly chunks = new Map<string, Uint8Array>()
  /** One blob per layer (its chunk frames back to back), by sha256 hex. */
  readonly blobs = new Map<string, Buffer>()
  readonly tocs: LayerToc[] = []
  readonly #compress: (plain: Uint8Array) => Uint8Array

  constructor (options: MemoryImageOptions = {}) {
    this.#compress = options.compress ?? (plain => plain)
  }

  /** Add a layer on top; returns its TOC. Sync. */
  addLayer (entries: readonly MemoryEntry[], options: MemoryLayerOptions): LayerToc {
    const locations: ChunkLocation[] = []
    const frames: Uint8Array[] = []
    const index = new Map<string, number>()
    let blobOffset = 0
    const addChunk = (data: Uint8Array): number => {
      const digest = sha256Hex(data)
      const known = index.get(digest)
      if (known !== undefined) return known
      this.chunks.set(digest, data)
      index.set(digest, locations.length)
      const frame = this.#compress(data)
      frames.push(frame)
      locations.push({ digest, blob: 0, offset: blobOffset, compressedLength: frame.length, length: data.length })
      blobOffset += frame.length
      return locations.length - 1
    }
    const tocEntries: TocEntry[] = entries.map(e => {
      const { content, ...rest } = e
      const isFile = e.type === 'file'
      return {
        mode: e.type === 'dir' ? 0o755 : 0o644, uid: 0, gid: 0, mtime: 1_700_000_000, ...rest, size: isFile ? (content?.length ?? 0) : 0
      }
    })
    if (options.stream === true) {
      const stream = Buffer.concat(entries.map(e => e.content ?? new Uint8Array(0)))
      const chunkIds: number[] = []
      for (let at = 0; at < stream.length; at += options.chunkSize) chunkIds.push(addChunk(stream.subarray(at, at + options.chunkSize)))
      let at = 0
      entries.forEach((e, i) => {
        const size = e.content?.length ?? 0
        if (size > 0) tocEntries[i]!.spans = spansOf(at, size, options.chunkSize, chunkIds)
        at += size
      })
    } else {
      entries.forEach((e, i) => {
        const content = e.content
        if (content === undefined || content.length === 0) return
        const spans: ChunkSpan[] = []
        for (let at = 0; at < content.length; at += options.chunkSize) {
          const piece = content.subarray(at, at + options.chunkSize)
          spans.push({ chunk: addChunk(piece), offset: 0, length: piece.length })
        }
        tocEntries[i]!.spans = spans
      })
    }
    const blobBytes = Buffer.concat(frames)
    // A layer without content still names a blob; make it distinct per layer.
    const blob = sha256Hex(frames.length > 0 ? blobBytes : Buffer.from(`empty layer ${this.tocs.length}`))
    if (frames.length > 0) this.blobs.set(blob, blobBytes)
    const toc: LayerToc = { diffId: ZERO_DIFF_ID, blobs: [blob], chunks: locations, entries: tocEntries }
    this.tocs.push(toc)
    return toc
  }
}

/** Spans covering stream bytes [start, start + size) over fixed-size chunks `chunkIds`. */
function spansOf (start: number, size: number, chunkSize: number, chunkIds: number[]): ChunkSpan[] {
  const spans: ChunkSpan[] = []
  let pos = start
  const end = start + size
  while (pos < end) {
    const k = Math.floor(pos / chunkSize)
    const offset = pos - k * chunkSize
    const length = Math.min(chunkSize - offset, end - pos)
    spans.push({ chunk: chunkIds[k]!, offset, length })
    pos += length
  }
  return spans
}

/** Deterministic pseudo-random bytes (xorshift32) so content differs at every offset. Sync. */
export function patternBytes (length: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(length)
  let x = (seed | 0) || 1
  let i = 0
  for (; i + 4 <= length; i += 4) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5
    out.writeInt32LE(x, i)
  }
  for (; i < length; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; out[i] = x & 0xff }
  return out
}
