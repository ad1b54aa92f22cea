/**
 * Turns one layer's entry stream into a TOC: file contents are cut into
 * chunks (chunking-strategy.ts), hashed and compressed on the encoder pool,
 * deduplicated against this push and the store (ChunkIndex), and new chunks
 * packed into blobs (BlobPacker). Returns the TOC once every new blob of the
 * layer is in the store; writing the TOC object is the caller's job.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import type { ChunkLocation, LayerToc, TocEntry } from '../format/toc.js'
import type { BlobPacker, PackHandle } from './blob-packer.js'
import type { ChunkEncoderPool, EncodedChunk } from './chunk-encoder.js'
import type { ChunkIndex } from './chunk-index.js'
import { isolatesFile, newChunker, type ChunkingStrategy } from './chunking-strategy.js'
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
  encoder: ChunkEncoderPool
  packer: BlobPacker
  index: ChunkIndex
  session: PushSession
  strategy: ChunkingStrategy
  /** Called with the plain bytes of file content read so far, at most every few MiB. */
  onProgress?: (plainBytes: number) => void
}

/** Encoded results in flight are bounded by this many plain bytes (memory bound). */
const MAX_PENDING_PLAIN_BYTES = 64 * 1024 * 1024
const PROGRESS_STEP_BYTES = 4 * 1024 * 1024

interface PendingChunk { encoded: Promise<EncodedChunk>, start: number, length: number }
interface PlacedChunk { start: number, length: number, tocIndex: number }
interface FileExtent { entry: TocEntry, start: number }

/**
 * Read `layer` to the end and build its TOC. Async. Throws what the source
 * throws (BadInputError, LimitExceededError) and store failures; on failure
 * nothing refers to the blobs already uploaded except the dedup index.
 */
export async function writeLayer (layer: LayerSource, deps: LayerWriterDeps): Promise<{ toc: LayerToc, stats: LayerWriteStats }> {
  const { encoder, packer, index, session, strategy } = deps
  const chunker = newChunker(strategy)
  const stats: LayerWriteStats = { entries: 0, plainBytes: 0, newPlainBytes: 0, newStoredBytes: 0, dedupPlainBytes: 0, storedBytes: 0 }
  const entries: TocEntry[] = []
  const files: FileExtent[] = []
  const placed: PlacedChunk[] = []
  const tocChunks: Array<{ digest: string, place: ChunkPlace }> = []
  const tocChunkByDigest = new Map<string, number>()
  const pending: PendingChunk[] = []
  let pendingBytes = 0
  /** Stream offset of the next chunk to be submitted, and of the next byte fed to the chunker. */
  let streamPos = 0
  let fedPos = 0
  let nextProgress = PROGRESS_STEP_BYTES

  const settleOldest = async (): Promise<void> => {
    const p = pending.shift()!
    pendingBytes -= p.length
    const chunk = await p.encoded
    let tocIndex = tocChunkByDigest.get(chunk.digest)
    if (tocIndex === undefined) {
      let place: ChunkPlace | undefined = session.get(chunk.digest) ?? index.lookup(chunk.digest)
      if (place === undefined) {
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
    placed.push({ start: p.start, length: p.length, tocIndex })
  }

  const submit = async (chunk: Uint8Array): Promise<void> => {
    pending.push({ encoded: encoder.encode(chunk), start: streamPos, length: chunk.length })
    streamPos += chunk.length
    pendingBytes += chunk.length
    while (pendingBytes > MAX_PENDING_PLAIN_BYTES) await settleOldest()
  }

  const cut = async (): Promise<void> => {
    const last = chunker.flush()
    if (last !== undefined) await submit(last)
  }

  for await (const { header, body } of layer.entries()) {
    const entry: TocEntry = { ...header }
    entries.push(entry)
    stats.entries++
    if (body === undefined) continue
    const isolate = isolatesFile(strategy, header.size)
    if (isolate) await cut()
    files.push({ entry, start: fedPos })
    for await (const piece of body) {
      fedPos += piece.length
      for (const chunk of chunker.push(piece)) await submit(chunk)
      stats.plainBytes += piece.length
      if (stats.plainBytes >= nextProgress) { deps.onProgress?.(stats.plainBytes); nextProgress += PROGRESS_STEP_BYTES }
    }
    if (isolate) await cut()
  }
  await cut()
  encoder.flush()
  while (pending.length > 0) await settleOldest()
  await packer.finish()
  deps.onProgress?.(stats.plainBytes)

  assignSpans(files, placed)
  const { blobs, chunks } = chunkTable(tocChunks)
  return { toc: { diffId: layer.diffId(), blobs, chunks, entries }, stats }
}

/** Map each file's byte range in the layer stream onto the chunks that cover it. */
function assignSpans (files: FileExtent[], placed: PlacedChunk[]): void {
  let c = 0
  for (const { entry, start } of files) {
    if (entry.size === 0) continue
    const end = start + entry.size
    while (placed[c]!.start + placed[c]!.length <= start) c++
    entry.spans = []
    for (let k = c; k < placed.length && placed[k]!.start < end; k++) {
      const p = placed[k]!
      const from = Math.max(start, p.start)
      const to = Math.min(end, p.start + p.length)
      entry.spans.push({ chunk: p.tocIndex, offset: from - p.start, length: to - from })
    }
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
