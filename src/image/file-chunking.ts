/**
 * The CPU-heavy half of push, run on worker threads (or inline): cut each
 * file's bytes into content-defined chunks (per-file FastCDC), hash each
 * chunk (its id) and compress it into one independent zstd frame.
 *
 * Input is a batch of file pieces; pieces of one file arrive in order, on
 * the same FileChunker, which keeps each open file's chunker until its last
 * piece. Output: for every piece, the chunks it completed.
 *
 * May import: src/format/, src/state/node-db.ts, zstd-napi's binding, node built-ins.
 */
import zstd from 'zstd-napi/binding.js'
import { FastCdcChunker, type FastCdcOptions } from '../format/chunker.js'
import { sha256Hex } from '../format/digest.js'
import { openSqlite } from '../state/node-db.js'

export interface ChunkingParams {
  /** zstd level of chunk frames. */
  level: number
  cdc: FastCdcOptions
  /**
   * The node's dedup index (chunk-index.ts), read-only: a chunk the store
   * already holds is hashed but not compressed (most of a new version's
   * chunks). Absent: every chunk is compressed.
   */
  dedup?: { dbPath: string, storeUrl: string }
}

/** A batch of pieces packed back to back in `data`: piece i is [ends[i-1], ends[i]) of file `files[i]`. */
export interface PieceBatch {
  data: Uint8Array
  files: number[]
  ends: number[]
  /** Piece i is its file's last. */
  last: boolean[]
}

export interface ChunkedBatch {
  /** Per chunk, in order: sha256 hex of the plain bytes, plain length, end of its frame in `data` (an empty frame: the store already holds the chunk). */
  digests: string[]
  lengths: number[]
  frameEnds: number[]
  data: ArrayBuffer
  /** How many of the chunks each piece completed. */
  counts: number[]
}

export class FileChunker {
  readonly #params: ChunkingParams
  readonly #open = new Map<number, FastCdcChunker>()
  readonly #cctx = new zstd.CCtx()
  readonly #isStored: ((digest: string) => boolean) | undefined

  constructor (params: ChunkingParams) {
    this.#params = params
    if (params.dedup !== undefined) {
      const db = openSqlite(params.dedup.dbPath, { readonly: true, fileMustExist: true })
      const lookup = db.prepare('SELECT 1 FROM chunk_index WHERE store = ? AND digest = ?').pluck()
      const store = params.dedup.storeUrl
      this.#isStored = digest => lookup.get(store, digest) !== undefined
    }
  }

  /**
   * Sync. `batch.data` may be reused as soon as this returns: open chunks
   * keep copies of their bytes. Every new chunk is compressed straight into
   * one output buffer (no buffer per frame).
   */
  process (batch: PieceBatch): ChunkedBatch {
    const chunks: Uint8Array[] = []
    const counts: number[] = []
    let start = 0
    batch.files.forEach((file, i) => {
      const end = batch.ends[i]!
      let chunker = this.#open.get(file)
      if (chunker === undefined) { chunker = new FastCdcChunker(this.#params.cdc); this.#open.set(file, chunker) }
      const done = chunker.push(batch.data.subarray(start, end))
      if (batch.last[i] === true) {
        const tail = chunker.flush()
        if (tail !== undefined) done.push(tail)
        this.#open.delete(file)
      }
      for (const chunk of done) chunks.push(chunk)
      counts.push(done.length)
      start = end
    })
    const digests = chunks.map(c => sha256Hex(c))
    const lengths = chunks.map(c => c.length)
    const stored = chunks.map((_, k) => this.#isStored?.(digests[k]!) === true)
    let bound = 0
    chunks.forEach((c, k) => { if (!stored[k]!) bound += zstd.compressBound(c.length) })
    const data = new ArrayBuffer(bound)
    const frameEnds: number[] = []
    let pos = 0
    chunks.forEach((c, k) => {
      if (!stored[k]!) pos += this.#cctx.compress(new Uint8Array(data, pos), c, this.#params.level)
      frameEnds.push(pos)
    })
    for (const chunker of this.#open.values()) chunker.detach()
    return { digests, lengths, frameEnds, data, counts }
  }
}
