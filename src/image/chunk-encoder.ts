/**
 * ChunkEncoderPool: hashes and compresses chunks on worker threads, so push
 * runs tar parsing and chunking on the main thread while both cores
 * compress. Results come back in submission order.
 *
 * Chunks are copied into batches (about BATCH_BYTES each) that are
 * transferred, not cloned, to the workers and back.
 *
 * May import: nothing from the project but chunk-encoding.ts.
 */
import { availableParallelism } from 'node:os'
import { Worker } from 'node:worker_threads'
import { encodeBatch, type EncodedBatch } from './chunk-encoding.js'

export interface EncodedChunk {
  /** sha256 hex of the plain bytes. */
  digest: string
  length: number
  /** One zstd frame, owned by the caller. */
  compressed: Uint8Array
}

const BATCH_BYTES = 1024 * 1024
/** Largest chunk accepted: the chunkers' max is far below. */
export const MAX_CHUNK_BYTES = 1024 * 1024

interface Pending { resolve: (r: EncodedChunk[]) => void, reject: (e: Error) => void, lengths: number[] }

export class ChunkEncoderPool {
  readonly #level: number
  readonly #workers: Worker[] = []
  readonly #load: number[] = []
  readonly #pending = new Map<number, Pending>()
  #nextId = 0
  /** The batch being filled: chunks are copied straight into `#batchBuf`. */
  #batchBuf: Uint8Array = newBatchBuffer()
  #batchBytes = 0
  #batchEnds: number[] = []
  #batchResult: Promise<EncodedChunk[]> | undefined
  #settleBatch: Pending | undefined
  #closed = false

  /** `workers: 0` encodes inline on the calling thread (tests, tiny inputs). */
  constructor (opts: { level: number, workers?: number }) {
    this.#level = opts.level
    const n = opts.workers ?? Math.max(1, Math.min(4, availableParallelism()))
    for (let i = 0; i < n; i++) {
      const w = new Worker(new URL('./chunk-encoder-worker.js', import.meta.url), { workerData: { level: opts.level } })
      w.on('message', (msg: EncodedBatch & { id: number }) => this.#onResult(i, msg))
      w.on('error', err => this.#failAll(err))
      w.unref()
      this.#workers.push(w)
      this.#load.push(0)
    }
  }

  /**
   * Queue a chunk (at most MAX_CHUNK_BYTES). The bytes are copied before
   * this returns, so the caller may reuse its buffer. Batches go to a worker
   * when full or on `flush()`: call `flush()` before awaiting a result that
   * may still sit in an unsent batch. Rejects if a worker dies.
   */
  encode (chunk: Uint8Array): Promise<EncodedChunk> {
    if (this.#closed) return Promise.reject(new Error('ChunkEncoderPool is closed'))
    if (chunk.length > MAX_CHUNK_BYTES) return Promise.reject(new RangeError(`chunk of ${chunk.length} bytes exceeds ${MAX_CHUNK_BYTES}`))
    if (this.#batchResult === undefined) {
      this.#batchResult = new Promise<EncodedChunk[]>((resolve, reject) => { this.#settleBatch = { resolve, reject, lengths: [] } })
    }
    const index = this.#batchEnds.length
    this.#batchBuf.set(chunk, this.#batchBytes)
    this.#batchBytes += chunk.length
    this.#batchEnds.push(this.#batchBytes)
    this.#settleBatch!.lengths.push(chunk.length)
    const result = this.#batchResult.then(r => r[index]!)
    result.catch(() => {}) // a caller that gave up (failed push) must not leave an unhandled rejection
    if (this.#batchBytes >= BATCH_BYTES) this.flush()
    return result
  }

  /** Send the current batch now. Sync. */
  flush (): void {
    const settle = this.#settleBatch
    if (settle === undefined) return
    const plain = this.#batchBuf.subarray(0, this.#batchBytes)
    const ends = this.#batchEnds
    this.#batchBuf = newBatchBuffer()
    this.#batchBytes = 0
    this.#batchEnds = []
    this.#batchResult = undefined
    this.#settleBatch = undefined
    if (this.#workers.length === 0) {
      try { settle.resolve(split(encodeBatch(plain, ends, this.#level), settle.lengths)) } catch (err) { settle.reject(err as Error) }
      return
    }
    const i = this.#load.indexOf(Math.min(...this.#load))
    const id = this.#nextId++
    this.#pending.set(id, settle)
    this.#load[i]!++
    this.#workers[i]!.ref() // keep the process alive while a batch is out
    this.#workers[i]!.postMessage({ id, data: plain.buffer, length: plain.length, ends }, [plain.buffer as ArrayBuffer])
  }

  #onResult (worker: number, msg: EncodedBatch & { id: number }): void {
    if (--this.#load[worker]! === 0) this.#workers[worker]!.unref()
    const p = this.#pending.get(msg.id)
    if (p === undefined) return
    this.#pending.delete(msg.id)
    p.resolve(split(msg, p.lengths))
  }

  #failAll (err: Error): void {
    for (const p of this.#pending.values()) p.reject(err)
    this.#pending.clear()
  }

  /** Stop the workers. Idempotent; pending encodes reject. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#failAll(new Error('ChunkEncoderPool closed'))
    await Promise.all(this.#workers.map(w => w.terminate()))
  }
}

/** Not zero-filled: every byte sent is written first. Its own ArrayBuffer (not the pool), so it can be transferred. */
function newBatchBuffer (): Uint8Array {
  return Buffer.allocUnsafeSlow(BATCH_BYTES + MAX_CHUNK_BYTES)
}

function split (batch: EncodedBatch, lengths: number[]): EncodedChunk[] {
  const data = new Uint8Array(batch.data)
  let start = 0
  return batch.ends.map((end, i) => {
    const out = { digest: batch.digests[i]!, length: lengths[i]!, compressed: data.subarray(start, end) }
    start = end
    return out
  })
}
