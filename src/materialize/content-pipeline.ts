/**
 * Reads the content of many files in order, with the reads for the files
 * ahead already in flight: files are grouped into batches of about
 * BATCH_PLAIN_BYTES (one `ChunkBatchReader.read` call each, so the fetcher can
 * merge adjacent chunks into one range GET), and up to WINDOW_BATCHES
 * batches are fetched ahead of the consumer. Memory stays bounded by the
 * window, whatever the image size.
 *
 * May import: src/format/, this folder.
 */
import { resolveChunk, type ChunkRef, type ChunkSpan, type LayerToc } from '../format/toc.js'
import type { ChunkBatchReader } from './chunk-batch-reader.js'

export const BATCH_PLAIN_BYTES = 8 * 1024 * 1024
export const WINDOW_BATCHES = 8

/** One file (or a slice of a large one) as spans of one layer's TOC. */
interface Piece { toc: LayerToc, spans: ChunkSpan[] }
interface Batch { pieces: Piece[], bytes: number }

export interface FileContent { toc: LayerToc, spans: readonly ChunkSpan[] }

export class ContentPipeline {
  readonly #reader: ChunkBatchReader
  readonly #batches: Batch[] = []
  readonly #inFlight: Array<Promise<Buffer[]>> = []
  #nextToStart = 0
  #current: Buffer[] = []

  /** `files` in the order they will be consumed. Sync; nothing is read until `next()`. */
  constructor (reader: ChunkBatchReader, files: Iterable<FileContent>) {
    this.#reader = reader
    let batch: Batch = { pieces: [], bytes: 0 }
    const push = (p: Piece, bytes: number): void => {
      if (batch.bytes > 0 && batch.bytes + bytes > BATCH_PLAIN_BYTES) { this.#batches.push(batch); batch = { pieces: [], bytes: 0 } }
      batch.pieces.push(p)
      batch.bytes += bytes
    }
    for (const { toc, spans } of files) {
      let part: ChunkSpan[] = []
      let partBytes = 0
      for (const s of spans) {
        if (partBytes > 0 && partBytes + s.length > BATCH_PLAIN_BYTES) { push({ toc, spans: part }, partBytes); part = []; partBytes = 0 }
        part.push(s)
        partBytes += s.length
      }
      push({ toc, spans: part }, partBytes) // empty files too: one piece each, kept in order
    }
    if (batch.pieces.length > 0) this.#batches.push(batch)
  }

  /**
   * The next piece of file content, in construction order: one Buffer per
   * file, or several consecutive ones for a file above BATCH_PLAIN_BYTES
   * (`pieces(file)` tells how many). Async.
   */
  async next (): Promise<Buffer> {
    if (this.#current.length === 0) {
      while (this.#inFlight.length < WINDOW_BATCHES && this.#nextToStart < this.#batches.length) {
        const batch = this.#batches[this.#nextToStart++]!
        const p = this.#readBatch(batch)
        p.catch(() => {}) // surfaced when consumed
        this.#inFlight.push(p)
      }
      const head = this.#inFlight.shift()
      if (head === undefined) throw new RangeError('ContentPipeline: read past the last file')
      this.#current = await head
    }
    return this.#current.shift()!
  }

  /** How many `next()` results a file with these spans takes. */
  static pieces (spans: readonly ChunkSpan[]): number {
    let n = 1
    let bytes = 0
    for (const s of spans) {
      if (bytes > 0 && bytes + s.length > BATCH_PLAIN_BYTES) { n++; bytes = 0 }
      bytes += s.length
    }
    return n
  }

  async #readBatch (batch: Batch): Promise<Buffer[]> {
    const refs: ChunkRef[] = []
    const slot = new Map<string, number>()
    const wanted = batch.pieces.map(p => p.spans.map(s => {
      const ref = resolveChunk(p.toc, s.chunk)
      let i = slot.get(ref.digest)
      if (i === undefined) { i = refs.length; refs.push(ref); slot.set(ref.digest, i) }
      return { i, s }
    }))
    const chunks = await this.#reader.read(refs)
    return wanted.map(list => {
      if (list.length === 1) { const { i, s } = list[0]!; return chunks[i]!.subarray(s.offset, s.offset + s.length) }
      return Buffer.concat(list.map(({ i, s }) => chunks[i]!.subarray(s.offset, s.offset + s.length)))
    })
  }
}
