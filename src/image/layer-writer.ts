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
import { NO_BYTES, type ChunkingPool, type EncodedChunk } from './chunking-pool.js'
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
 */
export async function writeLayer (layer: LayerSource, deps: LayerWriterDeps): Promise<{ toc: LayerToc, stats: LayerWriteStats }> {
  const { chunking, packer, index, session } = deps
  const stats: LayerWriteStats = { entries: 0, plainBytes: 0, newPlainBytes: 0, newStoredBytes: 0, dedupPlainBytes: 0, storedBytes: 0 }
  const entries: TocEntry[] = []
  const tocChunks: Array<{ digest: string, place: ChunkPlace }> = []
  const tocChunkByDigest = new Map<string, number>()
  const pending: PendingPiece[] = []
  const pendingBytes = { piece: 0, byPath: 0 }
  let nextFile = 0
  let nextProgress = PROGRESS_STEP_BYTES

  /** Place the chunks of the oldest piece (store, dedup or reuse) and append them to its file's spans. */
  const settleOldest = async (): Promise<void> => {
    const p = pending.shift()!
    if (p.byPath) pendingBytes.byPath -= p.bytes
    else pendingBytes.piece -= p.bytes
    for (const chunk of await p.chunks) {
      let tocIndex = tocChunkByDigest.get(chunk.digest)
      if (tocIndex === undefined) {
        let place: ChunkPlace | undefined = session.get(chunk.digest) ?? index.lookup(chunk.digest)
        if (place === undefined) {
          if (chunk.compressed.length === 0) throw new Error(`internal: chunk ${chunk.digest} was reported stored but is not in the dedup index`)
          place = await packer.add(chunk)
          session.set(chunk.digest, place)
          stats.newPlainBytes += chunk.length
          stats.newStoredBytes += chunk.compressed.length
        } else {
          stats.dedupPlainBytes += chunk.length
        }
        tocIndex = tocChunks.length
        tocChunks.push({ digest: chunk.digest, place })
        tocChunkByDigest.set(chunk.digest, tocIndex)
        stats.storedBytes += place.compressedLength
      } else {
        stats.dedupPlainBytes += chunk.length
      }
      p.entry.spans!.push({ chunk: tocIndex, offset: 0, length: chunk.length })
    }
  }

  const countRead = (bytes: number): void => {
    stats.plainBytes += bytes
    if (stats.plainBytes >= nextProgress) { deps.onProgress?.(stats.plainBytes); nextProgress += PROGRESS_STEP_BYTES }
  }

  /** Queue `p`; settle whatever is already done (results are dropped as soon as they are packed); wait while a bound is passed. */
  const enqueue = async (p: PendingPiece): Promise<void> => {
    pending.push(p)
    p.chunks.then(() => { p.ready = true }, () => { p.ready = true })
    if (p.byPath) pendingBytes.byPath += p.bytes
    else pendingBytes.piece += p.bytes
    while (pending[0]?.ready === true) await settleOldest()
    if (pendingBytes.piece > MAX_PENDING_PIECE_BYTES || pendingBytes.byPath > MAX_PENDING_BY_PATH_BYTES) {
      chunking.flush()
      while (pendingBytes.piece > MAX_PENDING_PIECE_BYTES / 2 || pendingBytes.byPath > MAX_PENDING_BY_PATH_BYTES / 2) await settleOldest()
    }
  }

  for await (const { header, body, file: onDisk } of layer.entries()) {
    const entry: TocEntry = { ...header }
    entries.push(entry)
    stats.entries++
    if (body === undefined || header.size === 0) continue
    entry.spans = []
    const file = nextFile++
    if (onDisk !== undefined && header.size <= MAX_FILE_BY_PATH_BYTES) {
      // A worker reads it: this thread neither reads nor copies the bytes.
      await enqueue({ chunks: chunking.pushFile(file, { ...onDisk, size: header.size }), entry, bytes: header.size, byPath: true })
      countRead(header.size)
      continue
    }
    for await (const piece of body) {
      await enqueue({ chunks: chunking.push(file, piece, false), entry, bytes: piece.length, byPath: false })
      countRead(piece.length)
    }
    await enqueue({ chunks: chunking.push(file, NO_BYTES, true), entry, bytes: 0, byPath: false })
  }
  chunking.flush()
  while (pending.length > 0) await settleOldest()
  await packer.finish()
  deps.onProgress?.(stats.plainBytes)
  const { blobs, chunks } = chunkTable(tocChunks)
  return { toc: { diffId: layer.diffId(), blobs, chunks, entries }, stats }
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
