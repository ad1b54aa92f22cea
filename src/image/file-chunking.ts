/**
 * The CPU-heavy half of push, run on worker threads (or inline): cut each
 * file's bytes into content-defined chunks (per-file FastCDC), hash each
 * chunk (its id) and compress it into one independent zstd frame.
 *
 * Input is a batch of file pieces; pieces of one file arrive in order, on
 * the same FileChunker, which keeps each open file's chunker until its last
 * piece. Output: for every piece, the chunks it completed.
 *
 * May import: src/format/, src/state/node-db.ts, zstd-napi, node built-ins.
 */
import { Compressor } from 'zstd-napi'
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

/** Marks a chunk the store already holds: no frame was made for it. */
export const STORED_ELSEWHERE = new Uint8Array(0)

/** A batch of pieces packed back to back in `data`: piece i is [ends[i-1], ends[i]) of file `files[i]`. */
export interface PieceBatch {
  data: Uint8Array
  files: number[]
  ends: number[]
  /** Piece i is its file's last. */
  last: boolean[]
}

export interface ChunkedBatch {
  /** Per chunk, in order: sha256 hex of the plain bytes, plain length, end of its frame in `data`. */
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
  readonly #compressor = new Compressor()
  readonly #isStored: ((digest: string) => boolean) | undefined

  constructor (params: ChunkingParams) {
    this.#params = params
    this.#compressor.setParameters({ compressionLevel: params.level })
    if (params.dedup !== undefined) {
      const db = openSqlite(params.dedup.dbPath, { readonly: true, fileMustExist: true })
      const lookup = db.prepare('SELECT 1 FROM chunk_index WHERE store = ? AND digest = ?').pluck()
      const store = params.dedup.storeUrl
      this.#isStored = digest => lookup.get(store, digest) !== undefined
    }
  }

  /** Sync. The chunker keeps views of `batch.data` for chunks still open: the caller must not reuse it. */
  process (batch: PieceBatch): ChunkedBatch {
    const digests: string[] = []
    const lengths: number[] = []
    const frames: Uint8Array[] = []
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
      for (const chunk of done) {
        const digest = sha256Hex(chunk)
        digests.push(digest)
        lengths.push(chunk.length)
        frames.push(this.#isStored?.(digest) === true ? STORED_ELSEWHERE : this.#compressor.compress(chunk))
      }
      counts.push(done.length)
      start = end
    })
    const data = new ArrayBuffer(frames.reduce((n, f) => n + f.length, 0))
    const view = new Uint8Array(data)
    const frameEnds: number[] = []
    let pos = 0
    for (const f of frames) { view.set(f, pos); pos += f.length; frameEnds.push(pos) }
    return { digests, lengths, frameEnds, data, counts }
  }
}
