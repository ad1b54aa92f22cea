/**
 * Turns one layer's entry stream into a TOC: each file's bytes go to the
 * chunking pool (per-file FastCDC, sha256, zstd on worker threads), each
 * chunk is deduplicated against this push and the store (ChunkIndex), and
 * new chunks are packed into blobs (BlobPacker). Returns the TOC once every
 * new blob of the layer is in the store; writing the TOC object is the
 * caller's job.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import type { ChunkLocation, LayerToc, TocEntry } from '../format/toc.js'
import type { BlobPacker, PackHandle } from './blob-packer.js'
import type { ChunkingPool, EncodedChunk } from './chunking-pool.js'
import { MAX_FILE_BY_PATH_BYTES } from './file-chunking.js'
import type { ChunkIndex } from './chunk-index.js'
import type { LayerSource } from './sources/image-source.js'

/** Where a chunk is, once known: a sealed blob (`blob`) or a blob still being packed (`pack`). */
export interface ChunkPlace { blob?: string, pack?: PackHandle, offset: number, compressedLength: number, length: number }

/** Chunks placed during this push, so a chunk seen twice before its blob is sealed is stored once. */
export type PushSession = Map<string, ChunkPlace>

export interface LayerWriteStats {
  entries: number
  /** Plain bytes of file content. */
  plainBytes: number
  /** Plain and compressed bytes of chunks this layer stored for the first time. */
  newPlainBytes: number
  newStoredBytes: number
  /** Plain bytes of chunk occurrences found already stored (in the store or earlier in this push). */
  dedupPlainBytes: number
  /** Compressed bytes of all distinct chunks the layer references. */
  storedBytes: number
}

export interface LayerWriterDeps {
  chunking: ChunkingPool
  packer: BlobPacker
  /** Where the store already holds a chunk (the dedup index; for a store that was empty, nothing). */
  index: Pick<ChunkIndex, 'lookup'>
  session: PushSession
  /** Called with the plain bytes of file content read so far, at most every few MiB. */
  onProgress?: (plainBytes: number) => void
}

/**
 * Bounds on work handed to the pool and not yet settled, in plain bytes.
 * Pieces are bytes this process holds (a memory bound). Files a worker reads
 * by path cost no memory until a worker reaches them, so they may queue much
 * deeper: the walk then runs ahead of the workers instead of stalling each
 * time they fall behind, and never leaves them idle while it catches up
 * through directories of small files (bench/push-throughput.ts).
 */
const MAX_PENDING_PIECE_BYTES = 16 * 1024 * 1024
const MAX_PENDING_BY_PATH_BYTES = 256 * 1024 * 1024
const PROGRESS_STEP_BYTES = 4 * 1024 * 1024

interface PendingPiece { chunks: Promise<EncodedChunk[]>, entry: TocEntry, bytes: number, byPath: boolean, ready?: boolean }

/**
 * Read `layer` to the end and build its TOC. Async. Throws what the source
 * throws (BadInputError, LimitExceededError) and store failures; on failure
 * nothing refers to the blobs already uploaded except the dedup index.
 *
 * `whileUploading`, when given, is called (sync) with the finished TOC as
 * soon as every blob has its digest, while the last blobs are still being
 * written: CPU work on the TOC (encoding it) then overlaps the store's
 * writes and fsyncs instead of following them. Its result is returned as
 * `prepared`; it must not write the TOC anywhere (the blobs it names may not
 * be stored yet). If it throws, the uploads are still awaited first.
 */
export async function writeLayer<T = undefined> (layer: LayerSource, deps: LayerWriterDeps, whileUploading?: (toc: LayerToc) => T): Promise<{ toc: LayerToc, stats: LayerWriteStats, prepared: T | undefined }> {
  const w = new LayerWriter(deps)
  await w.readEntries(layer)
  await w.settleAll()
  // finish() seals the last blob before its first await, so every pack handle has its digest from here on.
  const uploaded = deps.packer.finish()
  let toc: LayerToc
  let prepared: T | undefined
  try {
    const { blobs, chunks } = chunkTable(w.tocChunks)
    toc = { diffId: layer.diffId(), blobs, chunks, entries: w.entries }
    prepared = whileUploading?.(toc)
  } catch (err) {
    await uploaded.catch(() => {})
    throw err
  }
  await uploaded
  deps.onProgress?.(w.stats.plainBytes)
  return { toc, stats: w.stats, prepared }
}

/**
 * The state of one layer's write. Its hot parts are small methods, and the
 * entry loop (readEntries) ends where its loop does: V8 optimizes a loop in
 * the middle of its first run, and code after it that had not run yet made
 * the optimized code bail out. (As one function with closures, writeLayer
 * was compiled five times per push; now the loop is compiled twice, and
 * V8's compile threads spend 0.93 s per push instead of 1.18 s. No change in
 * push time could be measured.)
 */
class LayerWriter {
  readonly stats: LayerWriteStats = { entries: 0, plainBytes: 0, newPlainBytes: 0, newStoredBytes: 0, dedupPlainBytes: 0, storedBytes: 0 }
  readonly entries: TocEntry[] = []
  readonly tocChunks: Array<{ digest: string, place: ChunkPlace }> = []
  readonly #deps: LayerWriterDeps
  readonly #tocChunkByDigest = new Map<string, number>()
  readonly #pending: PendingPiece[] = []
  #pendingPieceBytes = 0
  #pendingByPathBytes = 0
  #nextFile = 0
  #nextProgress = PROGRESS_STEP_BYTES

  constructor (deps: LayerWriterDeps) {
    this.#deps = deps
  }

  /** Hand every entry's content to the pool, settling results as they come. */
  async readEntries (layer: LayerSource): Promise<void> {
    const { chunking } = this.#deps
    for await (const { header, body, file: onDisk } of layer.entries()) {
      const entry: TocEntry = header // each entry's header is a fresh object: it becomes the TOC entry
      this.entries.push(entry)
      this.stats.entries++
      if (body === undefined || header.size === 0) continue
      entry.spans = []
      const file = this.#nextFile++
      if (onDisk !== undefined && header.size <= MAX_FILE_BY_PATH_BYTES) {
        // A worker reads it: this thread neither reads nor copies the bytes.
        const settling = this.#enqueue({ chunks: chunking.pushFile(file, { ...onDisk, size: header.size }), entry, bytes: header.size, byPath: true })
        if (settling !== undefined) await settling
        this.#countRead(header.size)
        continue
      }
      // The piece that completes the declared size is the file's last: no empty piece after it.
      let got = 0
      for await (const piece of body) {
        got += piece.length
        const settling = this.#enqueue({ chunks: chunking.push(file, piece, got >= header.size), entry, bytes: piece.length, byPath: false })
        if (settling !== undefined) await settling
        this.#countRead(piece.length)
      }
      if (got !== header.size) throw new Error(`internal: ${layer.name}: entry ${JSON.stringify(header.path)} delivered ${got} of ${header.size} bytes without an error`)
    }
  }

  /** Wait for and place every chunk still pending. */
  async settleAll (): Promise<void> {
    this.#deps.chunking.flush()
    while (this.#pending.length > 0) await this.#settleOldest()
  }

  #countRead (bytes: number): void {
    this.stats.plainBytes += bytes
    if (this.stats.plainBytes >= this.#nextProgress) { this.#deps.onProgress?.(this.stats.plainBytes); this.#nextProgress += PROGRESS_STEP_BYTES }
  }

  /**
   * Queue `p`. Returns undefined when there is nothing to do yet (most
   * entries: no promise, no await on this per-entry path), else a promise
   * of settling whatever is already done (results are dropped as soon as
   * they are packed) and of waiting while a bound is passed.
   */
  #enqueue (p: PendingPiece): Promise<void> | undefined {
    this.#pending.push(p)
    p.chunks.then(() => { p.ready = true }, () => { p.ready = true })
    if (p.byPath) this.#pendingByPathBytes += p.bytes
    else this.#pendingPieceBytes += p.bytes
    if (this.#pending[0]!.ready === true || this.#overBound(1)) return this.#settleDone()
    return undefined
  }

  async #settleDone (): Promise<void> {
    while (this.#pending[0]?.ready === true) await this.#settleOldest()
    if (this.#overBound(1)) {
      this.#deps.chunking.flush()
      while (this.#overBound(0.5)) await this.#settleOldest()
    }
  }

  #overBound (fraction: number): boolean {
    return this.#pendingPieceBytes > MAX_PENDING_PIECE_BYTES * fraction || this.#pendingByPathBytes > MAX_PENDING_BY_PATH_BYTES * fraction
  }

  /** Place the chunks of the oldest piece (store, dedup or reuse) and append them to its file's spans. */
  async #settleOldest (): Promise<void> {
    const p = this.#pending.shift()!
    if (p.byPath) this.#pendingByPathBytes -= p.bytes
    else this.#pendingPieceBytes -= p.bytes
    const { packer } = this.#deps
    for (const chunk of await p.chunks) {
      p.entry.spans!.push({ chunk: this.#place(chunk), offset: 0, length: chunk.length })
      const uploadSlot = packer.ready() // a promise only while a sealed blob waits for an upload slot
      if (uploadSlot !== undefined) await uploadSlot
    }
  }

  /** The TOC chunk index of `chunk`: one already in this TOC, or a new one (stored before, or packed now). Sync: it runs once per chunk. */
  #place (chunk: EncodedChunk): number {
    const { stats } = this
    const known = this.#tocChunkByDigest.get(chunk.digest)
    if (known !== undefined) {
      stats.dedupPlainBytes += chunk.length
      return known
    }
    const { session, index, packer } = this.#deps
    let place: ChunkPlace | undefined = session.get(chunk.digest) ?? index.lookup(chunk.digest)
    if (place === undefined) {
      if (chunk.compressed.length === 0) throw new Error(`internal: chunk ${chunk.digest} was reported stored but is not in the dedup index`)
      place = packer.add(chunk)
      session.set(chunk.digest, place)
      stats.newPlainBytes += chunk.length
      stats.newStoredBytes += chunk.compressed.length
    } else {
      stats.dedupPlainBytes += chunk.length
    }
    const tocIndex = this.tocChunks.length
    this.tocChunks.push({ digest: chunk.digest, place })
    this.#tocChunkByDigest.set(chunk.digest, tocIndex)
    stats.storedBytes += place.compressedLength
    return tocIndex
  }
}

function chunkTable (places: Array<{ digest: string, place: ChunkPlace }>): { blobs: string[], chunks: ChunkLocation[] } {
  const blobs: string[] = []
  const blobIndex = new Map<string, number>()
  const chunks = places.map(({ digest, place: p }) => {
    const blob = p.blob ?? p.pack!.digest!
    let b = blobIndex.get(blob)
    if (b === undefined) { b = blobs.length; blobs.push(blob); blobIndex.set(blob, b) }
    return { digest, blob: b, offset: p.offset, compressedLength: p.compressedLength, length: p.length }
  })
  return { blobs, chunks }
}
