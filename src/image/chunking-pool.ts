/**
 * ChunkingPool: push's worker threads. The main thread parses the input and
 * hands each file's bytes over in pieces, or (a small file of a directory
 * tree) just its path; workers read those, chunk, hash and compress
 * (file-chunking.ts), so both cores work and the main thread stays free
 * for walking, tar parsing, dedup and uploads.
 *
 * A file's pieces all go to one worker, in order (its chunker state lives
 * there). Pieces are copied into per-worker batches of about BATCH_BYTES,
 * transferred (not cloned) to the worker; results are transferred back,
 * with the batch's buffer, which the next batch reuses.
 *
 * May import: src/errors.ts, src/format/, src/state/chunk-index-table.ts, this folder.
 */
import { availableParallelism } from 'node:os'
import { Worker } from 'node:worker_threads'
import { BadInputError } from '../errors.js'
import { DEFAULT_FASTCDC_OPTIONS } from '../format/chunker.js'
import { openStoredChunkLookup } from '../state/chunk-index-table.js'
import { FileChunker, MAX_FILE_BY_PATH_BYTES, type ChunkedBatch, type ChunkingParams, type FileByPath } from './file-chunking.js'

export interface EncodedChunk {
  /** sha256 hex of the plain bytes. */
  digest: string
  length: number
  /** One zstd frame: a view of the batch's result, valid as long as the caller keeps it (copy it to keep less). Empty: the store already holds the chunk. */
  compressed: Uint8Array
}

export const DEFAULT_CHUNKING: ChunkingParams = { level: 3, cdc: DEFAULT_FASTCDC_OPTIONS }
const BATCH_BYTES = 1024 * 1024
/** A batch of many tiny files is sent before its weight says so, to keep both workers fed. */
const MAX_BATCH_ITEMS = 256
/** An empty piece: ends a file whose last bytes were already pushed, or stands for a file a worker reads by path. */
export const NO_BYTES = new Uint8Array(0)

/** Items of one batch, per item: file id, end in `buf`, last flag, path (a file read by the worker), and its promise. `weight` counts files read by path at their size. */
interface Batch { buf: Uint8Array, bytes: number, weight: number, files: number[], ends: number[], last: boolean[], paths: Array<FileByPath | null>, waiters: Array<(r: EncodedChunk[]) => void>, fail: Array<(e: Error) => void> }

/** A worker's answer: the chunks, and the batch's input buffer handed back for reuse. */
export type ChunkedReply = ChunkedBatch & { id: number, input: ArrayBuffer }

export class ChunkingPool {
  readonly #workers: Worker[] = []
  readonly #inline: FileChunker | undefined
  /** Bytes out at each worker (for routing new files) and batches out (to keep the process alive while any is). */
  readonly #outstanding: number[] = []
  readonly #batchesOut: number[] = []
  readonly #batches: Batch[] = []
  readonly #sent = new Map<number, Batch>()
  readonly #fileWorker = new Map<number, number>()
  /**
   * Input buffers the workers handed back. Reusing them keeps push from
   * allocating (and page-faulting in) a fresh MiB per batch, and keeps V8's
   * external-memory accounting from forcing collections.
   */
  readonly #spare: ArrayBuffer[] = []
  #nextId = 0
  #closed = false

  /** `workers: 0` does the work inline on the calling thread (tests, tiny inputs). */
  constructor (opts: { params?: ChunkingParams, workers?: number } = {}) {
    const params = opts.params ?? DEFAULT_CHUNKING
    const n = opts.workers ?? Math.max(1, Math.min(4, availableParallelism()))
    if (n === 0) {
      const { dedup } = params
      this.#inline = new FileChunker(params, dedup === undefined ? undefined : openStoredChunkLookup(dedup.dbPath, dedup.storeUrl, dedup.excludeBlobs))
    }
    for (let i = 0; i < n; i++) {
      const w = new Worker(new URL('./file-chunking-worker.js', import.meta.url), { workerData: params })
      w.on('message', (msg: ChunkedReply) => this.#onResult(i, msg))
      w.on('error', err => this.#failAll(err))
      w.unref()
      this.#workers.push(w)
      this.#outstanding.push(0)
      this.#batchesOut.push(0)
      this.#batches.push(this.#newBatch())
    }
  }

  /**
   * The next piece of file `file` (any id unique within the push); `last`
   * ends the file (the piece may be empty). Resolves with the chunks this
   * piece completed, in order. The bytes are copied before this returns.
   * Results may wait in a batch: call `flush()` before awaiting the newest.
   */
  push (file: number, piece: Uint8Array, last: boolean): Promise<EncodedChunk[]> {
    let w = this.#fileWorker.get(file)
    if (w === undefined && this.#inline === undefined) {
      w = this.#leastLoaded()
      this.#fileWorker.set(file, w)
    }
    if (last) this.#fileWorker.delete(file)
    return this.#enqueue(w, file, piece, null, last)
  }

  /**
   * All of file `file`, which a worker reads from disk itself (at most
   * MAX_FILE_BY_PATH_BYTES; see ExactFile for the checks). Resolves with its
   * chunks; rejects with BadInputError when the file is not as promised.
   * Batched like `push()`.
   */
  pushFile (file: number, byPath: FileByPath): Promise<EncodedChunk[]> {
    if (byPath.size > MAX_FILE_BY_PATH_BYTES) return Promise.reject(new Error(`internal: ${byPath.label}: ${byPath.size} bytes is too big to be read whole`))
    return this.#enqueue(this.#inline === undefined ? this.#leastLoaded() : undefined, file, NO_BYTES, byPath, true)
  }

  #leastLoaded (): number {
    return this.#outstanding.indexOf(Math.min(...this.#outstanding))
  }

  #enqueue (w: number | undefined, file: number, piece: Uint8Array, byPath: FileByPath | null, last: boolean): Promise<EncodedChunk[]> {
    if (this.#closed) return Promise.reject(new Error('ChunkingPool is closed'))
    if (w === undefined) return this.#runInline(file, piece, byPath, last)
    const result = new Promise<EncodedChunk[]>((resolve, reject) => {
      let batch = this.#batches[w]!
      if (batch.bytes + piece.length > batch.buf.length && batch.files.length > 0) { this.#send(w); batch = this.#batches[w]! }
      if (piece.length > batch.buf.length) batch.buf = Buffer.allocUnsafeSlow(piece.length) // an unusually large piece gets a batch of its own
      batch.buf.set(piece, batch.bytes)
      batch.bytes += piece.length
      batch.weight += piece.length + (byPath?.size ?? 0)
      batch.files.push(file)
      batch.ends.push(batch.bytes)
      batch.last.push(last)
      batch.paths.push(byPath)
      batch.waiters.push(resolve)
      batch.fail.push(reject)
      if (batch.weight >= BATCH_BYTES || batch.files.length >= MAX_BATCH_ITEMS) this.#send(w)
    })
    result.catch(() => {}) // a caller that gave up (failed push) must not leave an unhandled rejection
    return result
  }

  #runInline (file: number, piece: Uint8Array, byPath: FileByPath | null, last: boolean): Promise<EncodedChunk[]> {
    try {
      const out = this.#inline!.process({ data: piece, files: [file], ends: [piece.length], last: [last], paths: [byPath] })
      const failure = out.failures[0]
      if (failure !== undefined) return Promise.reject(new BadInputError(failure[1]))
      return Promise.resolve(split(out, 0, out.counts[0]!))
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** Send every partly filled batch now. Sync. */
  flush (): void {
    for (let w = 0; w < this.#workers.length; w++) if (this.#batches[w]!.files.length > 0) this.#send(w)
  }

  #send (w: number): void {
    const batch = this.#batches[w]!
    this.#batches[w] = this.#newBatch()
    const id = this.#nextId++
    this.#sent.set(id, batch)
    this.#outstanding[w]! += batch.weight
    if (this.#batchesOut[w]!++ === 0) this.#workers[w]!.ref() // keep the process alive while a batch is out
    this.#workers[w]!.postMessage(
      { id, data: batch.buf.buffer, length: batch.bytes, files: batch.files, ends: batch.ends, last: batch.last, paths: batch.paths },
      [batch.buf.buffer as ArrayBuffer])
  }

  #newBatch (): Batch {
    const spare = this.#spare.pop()
    return { buf: spare !== undefined ? new Uint8Array(spare) : Buffer.allocUnsafeSlow(BATCH_BYTES), bytes: 0, weight: 0, files: [], ends: [], last: [], paths: [], waiters: [], fail: [] }
  }

  #onResult (w: number, msg: ChunkedReply): void {
    if (msg.input.byteLength === BATCH_BYTES) this.#spare.push(msg.input)
    const batch = this.#sent.get(msg.id)
    if (batch === undefined) return
    this.#sent.delete(msg.id)
    this.#outstanding[w]! -= batch.weight
    if (--this.#batchesOut[w]! === 0) this.#workers[w]!.unref()
    const failed = new Map(msg.failures)
    let first = 0
    msg.counts.forEach((count, i) => {
      const failure = failed.get(i)
      if (failure !== undefined) batch.fail[i]!(new BadInputError(failure))
      else batch.waiters[i]!(split(msg, first, count))
      first += count
    })
  }

  #failAll (err: Error): void {
    for (const batch of this.#sent.values()) for (const f of batch.fail) f(err)
    this.#sent.clear()
  }

  /** Stop the workers. Idempotent; pending pieces reject. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#failAll(new Error('ChunkingPool closed'))
    for (const b of this.#batches) for (const f of b.fail) f(new Error('ChunkingPool closed'))
    await Promise.all(this.#workers.map(w => w.terminate()))
  }
}

function split (batch: ChunkedBatch, first: number, count: number): EncodedChunk[] {
  const data = new Uint8Array(batch.data)
  const out: EncodedChunk[] = []
  for (let k = first; k < first + count; k++) {
    const start = k === 0 ? 0 : batch.frameEnds[k - 1]!
    out.push({ digest: batch.digests[k]!, length: batch.lengths[k]!, compressed: data.subarray(start, batch.frameEnds[k]!) })
  }
  return out
}
