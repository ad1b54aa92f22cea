/**
 * BlobPacker: packs the new chunks of a push into blobs of about
 * `targetBytes` compressed bytes, uploads each sealed blob and then its blob
 * index, and records the chunks in the dedup index only once both are in the
 * store. A push that dies keeps every sealed blob for its rerun.
 *
 * A blob is kept as the list of its frames (views of the chunking results
 * they came in) and written with them as its parts (src/store/object-body.ts):
 * no thread copies its bytes into one buffer first.
 *
 * Uploads run in the background, at most `maxInFlight` at once. `add()` is
 * sync (it runs once per new chunk, on push's busiest thread); a blob sealed
 * while that many uploads run waits in a queue, and `ready()` hands the
 * caller a promise to wait on until it has started (backpressure: at most
 * one sealed blob waits).
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import { createHash, type Hash } from 'node:crypto'
import { blobKey } from '../format/keys.js'
import { bodyLength } from '../store/object-body.js'
import type { ObjectStore } from '../store/object-store.js'
import type { BlobChunk } from './blob-index.js'
import { putBlobIndex } from './blob-index.js'
import type { ChunkIndex } from './chunk-index.js'
import type { EncodedChunk } from './chunking-pool.js'

/** A blob being filled; `digest` is set when it is sealed. */
export interface PackHandle { digest: string | undefined }

export interface PackedChunk { pack: PackHandle, offset: number, compressedLength: number, length: number }

export interface PackerStats { blobs: number, uploadedBytes: number, chunks: number, plainBytes: number }

/** A full blob, its digest known, waiting for an upload slot. */
interface SealedBlob { digest: string, frames: Uint8Array[], chunks: BlobChunk[] }

export const DEFAULT_PACK_BYTES = 16 * 1024 * 1024

export class BlobPacker {
  readonly #store: Pick<ObjectStore, 'put'>
  readonly #index: ChunkIndex
  readonly #targetBytes: number
  readonly #maxInFlight: number
  #handle: PackHandle = { digest: undefined }
  /** The frames of the blob being filled, in order: views of the chunking results, which stay alive until its upload ends. */
  #frames: Uint8Array[] = []
  #chunks: BlobChunk[] = []
  #bytes = 0
  #hash: Hash = createHash('sha256')
  readonly #inFlight = new Set<Promise<void>>()
  /** Sealed blobs waiting for an upload slot, oldest first. */
  readonly #queued: SealedBlob[] = []
  #failure: unknown
  readonly stats: PackerStats = { blobs: 0, uploadedBytes: 0, chunks: 0, plainBytes: 0 }

  constructor (store: Pick<ObjectStore, 'put'>, index: ChunkIndex, opts: { targetBytes?: number, maxInFlight?: number } = {}) {
    this.#store = store
    this.#index = index
    this.#targetBytes = opts.targetBytes ?? DEFAULT_PACK_BYTES
    this.#maxInFlight = opts.maxInFlight ?? 2
  }

  /**
   * Append a new chunk; seals the blob once it is full. Sync; keeps a view
   * of the chunk's frame (the caller must not change its bytes). Rethrows an earlier upload
   * failure. After an add, await `ready()` (when it is not undefined) before
   * the next one.
   */
  add (chunk: EncodedChunk): PackedChunk {
    this.#throwIfFailed()
    const placed: PackedChunk = { pack: this.#handle, offset: this.#bytes, compressedLength: chunk.compressed.length, length: chunk.length }
    const frame = chunk.compressed
    this.#frames.push(frame)
    this.#hash.update(frame)
    this.#chunks.push({ digest: chunk.digest, offset: this.#bytes, compressedLength: chunk.compressed.length, length: chunk.length })
    this.#bytes += chunk.compressed.length
    this.stats.chunks++
    this.stats.plainBytes += chunk.length
    if (this.#bytes >= this.#targetBytes) this.#seal()
    return placed
  }

  /**
   * Undefined when no sealed blob waits for an upload slot (the common
   * case: no promise, no await); else a promise that resolves once none
   * does, and rejects with the first upload failure.
   */
  ready (): Promise<void> | undefined {
    if (this.#queued.length === 0 && this.#failure === undefined) return undefined
    return this.#drainQueue()
  }

  /** Seal the last blob and wait for every upload. Async; throws the first upload failure. Every handle has its digest once this returns its promise (the seal is sync). */
  async finish (): Promise<void> {
    if (this.#bytes > 0) this.#seal()
    await this.#drainQueue()
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight])
    this.#throwIfFailed()
  }

  async #drainQueue (): Promise<void> {
    while (this.#queued.length > 0 && this.#failure === undefined) await Promise.race(this.#inFlight)
    this.#throwIfFailed()
  }

  /** Give the blob being filled its digest and queue it for upload (sync); start uploads while slots are free. */
  #seal (): void {
    const handle = this.#handle
    handle.digest = this.#hash.digest('hex')
    this.#queued.push({ digest: handle.digest, frames: this.#frames, chunks: this.#chunks })
    this.#handle = { digest: undefined }
    this.#frames = []
    this.#chunks = []
    this.#bytes = 0
    this.#hash = createHash('sha256')
    this.#startUploads()
  }

  #startUploads (): void {
    while (this.#queued.length > 0 && this.#inFlight.size < this.#maxInFlight && this.#failure === undefined) {
      const { digest, frames, chunks } = this.#queued.shift()!
      const upload: Promise<void> = this.#upload(digest, frames, chunks)
        .catch(err => { this.#failure ??= err })
        .finally(() => {
          this.#inFlight.delete(upload)
          this.#startUploads()
        })
      this.#inFlight.add(upload)
    }
  }

  async #upload (digest: string, frames: Uint8Array[], chunks: BlobChunk[]): Promise<void> {
    await this.#store.put(blobKey(digest), frames)
    const indexBytes = await putBlobIndex(this.#store, digest, chunks)
    this.#index.addBlob(digest, chunks)
    this.stats.blobs++
    this.stats.uploadedBytes += bodyLength(frames) + indexBytes
  }


  #throwIfFailed (): void {
    if (this.#failure !== undefined) throw this.#failure
  }
}
