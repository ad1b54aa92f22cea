/**
 * The CPU-heavy half of push, run on worker threads (or inline): cut each
 * file's bytes into content-defined chunks (per-file FastCDC), hash each
 * chunk (its id) and compress it into one independent zstd frame.
 *
 * Input is a batch of items. An item is a piece of a file (pieces of one file
 * arrive in order, on the same FileChunker, which keeps each open file's
 * chunker until its last piece), or a whole small file of a directory tree
 * that the worker reads itself, so the thread that walks the tree neither
 * reads nor copies its content. Output: for every item, the chunks it
 * completed.
 *
 * May import: src/errors.ts, src/format/, ./native-cdc-scanner.ts,
 * ./sources/exact-file.ts, zstd-napi's binding, node built-ins. (The dedup
 * lookup is opened by whoever makes the FileChunker: a worker loads sqlite
 * only when there is a dedup index to read.)
 */
import zstd from 'zstd-napi/binding.js'
import { BadInputError } from '../errors.js'
import { chunkBuffer, FastCdcChunker, type FastCdcOptions } from '../format/chunker.js'
import { sha256Hex } from '../format/digest.js'
import { bestCdcScanner } from './native-cdc-scanner.js'
import { readExactFile } from './sources/exact-file.js'

export interface ChunkingParams {
  /** zstd level of chunk frames. */
  level: number
  cdc: FastCdcOptions
  /**
   * The node's dedup index (chunk-index.ts), read-only: a chunk the store
   * already holds is hashed but not compressed (most of a new version's
   * chunks). Absent: every chunk is compressed.
   */
  dedup?: { dbPath: string, storeUrl: string, excludeBlobs?: string[] }
}

/** A whole file that a worker reads from disk itself: exactly `size` bytes (ExactFile), `label` for errors. */
export interface FileByPath { path: string, size: number, label: string }

/**
 * A batch of items. Item i is either a piece of file `files[i]`, the bytes
 * [ends[i-1], ends[i]) of `data`, or (when `paths[i]` is set; ends[i] ===
 * ends[i-1]) all of a file, read from disk here.
 */
export interface PieceBatch {
  data: Uint8Array
  files: number[]
  ends: number[]
  /** Item i is its file's last piece (always true for a file read from disk). */
  last: boolean[]
  paths?: Array<FileByPath | null>
}

export interface ChunkedBatch {
  /** Per chunk, in order: sha256 hex of the plain bytes, plain length, end of its frame in `data` (an empty frame: the store already holds the chunk). */
  digests: string[]
  lengths: number[]
  frameEnds: number[]
  data: ArrayBuffer
  /** How many of the chunks each item completed. */
  counts: number[]
  /** Items whose file could not be read as promised (BadInputError messages), by item index; they completed no chunks. */
  failures: Array<[number, string]>
}

/** Files read from disk are read whole into a buffer this size (larger ones come as pieces). */
export const MAX_FILE_BY_PATH_BYTES = 4 * 1024 * 1024

export class FileChunker {
  readonly #params: ChunkingParams
  readonly #open = new Map<number, FastCdcChunker>()
  readonly #scanner = bestCdcScanner()
  readonly #whole: FastCdcChunker
  readonly #cctx = new zstd.CCtx()
  readonly #isStored: ((digest: string) => boolean) | undefined
  /** Files read from disk land here (+ 1: readExactFile finds a grown file in the same read); frames are compressed into `#out`, then copied out exactly. */
  #readBuf: Buffer | undefined
  #out = Buffer.allocUnsafeSlow(2 * 1024 * 1024)

  /** `isStored`: the lookup of `params.dedup` (openStoredChunkLookup), when it is set. */
  constructor (params: ChunkingParams, isStored?: (digest: string) => boolean) {
    if ((params.dedup === undefined) !== (isStored === undefined)) throw new Error('internal: FileChunker needs a dedup lookup exactly when params.dedup is set')
    this.#params = params
    this.#whole = new FastCdcChunker(params.cdc, this.#scanner)
    this.#isStored = isStored
  }

  /**
   * Sync. `batch.data` may be reused as soon as this returns: open chunks
   * keep copies of their bytes. Each chunk is hashed and compressed as soon
   * as it is cut, so a file read from disk needs only one reused buffer.
   */
  process (batch: PieceBatch): ChunkedBatch {
    const out: ChunkedBatch & { bytes: number } = { digests: [], lengths: [], frameEnds: [], data: new ArrayBuffer(0), counts: [], failures: [], bytes: 0 }
    let start = 0
    batch.files.forEach((file, i) => {
      const end = batch.ends[i]!
      const byPath = batch.paths?.[i]
      let done: Uint8Array[]
      if (byPath != null) {
        try {
          done = chunkBuffer(this.#whole, readExactFile(byPath.path, byPath.size, byPath.label, this.#readBuf ??= Buffer.allocUnsafeSlow(MAX_FILE_BY_PATH_BYTES + 1)))
        } catch (err) {
          if (!(err instanceof BadInputError)) throw err
          out.failures.push([i, err.message])
          done = []
        }
      } else {
        let chunker = this.#open.get(file)
        if (chunker === undefined) { chunker = new FastCdcChunker(this.#params.cdc, this.#scanner); this.#open.set(file, chunker) }
        done = chunker.push(batch.data.subarray(start, end))
        if (batch.last[i] === true) {
          const tail = chunker.flush()
          if (tail !== undefined) done.push(tail)
          this.#open.delete(file)
        }
      }
      for (const chunk of done) this.#encode(chunk, out)
      out.counts.push(done.length)
      start = end
    })
    for (const chunker of this.#open.values()) chunker.detach()
    const data = new ArrayBuffer(out.bytes)
    new Uint8Array(data).set(this.#out.subarray(0, out.bytes))
    return { digests: out.digests, lengths: out.lengths, frameEnds: out.frameEnds, data, counts: out.counts, failures: out.failures }
  }

  /** Hash `chunk` and, unless the store holds it, compress it onto the end of `#out`. */
  #encode (chunk: Uint8Array, out: ChunkedBatch & { bytes: number }): void {
    const digest = sha256Hex(chunk)
    out.digests.push(digest)
    out.lengths.push(chunk.length)
    if (this.#isStored?.(digest) !== true) {
      const need = out.bytes + zstd.compressBound(chunk.length)
      if (need > this.#out.length) {
        const grown = Buffer.allocUnsafeSlow(Math.max(need, 2 * this.#out.length))
        this.#out.copy(grown, 0, 0, out.bytes)
        this.#out = grown
      }
      out.bytes += this.#cctx.compress(this.#out.subarray(out.bytes), chunk, this.#params.level)
    }
    out.frameEnds.push(out.bytes)
  }
}
