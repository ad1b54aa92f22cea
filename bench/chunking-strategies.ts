/**
 * Candidate chunking strategies for bench/chunking.ts. Each one cuts a
 * layer's files (in tar order) into chunks and says which chunks every file
 * spans, so the bench can measure dedup, stored size and read locality.
 *
 * The `stream`, `per-file` and `hybrid` candidates cut exactly as push does
 * (as push did before it settled on per-file chunking: an isolated file flushes the chunker
 * before and after it); the others are baselines or alternatives.
 *
 * Bench-only: may import anything.
 */
import { FastCdcChunker, FixedSizeChunker, type Chunker } from '../src/format/chunker.js'
import type { SeriesFile } from './image-series.js'

/** A layer cut into chunks; file k spans chunks `files[k].first..files[k].last`. */
export interface LayerChunking {
  chunks: Uint8Array[]
  files: Array<{ size: number, first: number, last: number }>
}

export interface Candidate {
  name: string
  describe: string
  chunkLayer: (files: SeriesFile[]) => LayerChunking
}

const KIB = 1024
const MIB = 1024 * KIB
const WHOLE = Number.MAX_SAFE_INTEGER

/** FastCDC with the size ratios push uses: min = avg/4, max = avg*4. */
function cdc (avgSize: number): Chunker {
  return new FastCdcChunker({ minSize: avgSize / 4, avgSize, maxSize: avgSize * 4 })
}

/** Feeds files into one chunker as a stream, tracking where each file lands. */
class LayerCutter {
  private readonly chunks: Uint8Array[] = []
  private readonly chunkEnds: number[] = []
  private readonly fileRanges: Array<{ start: number, size: number }> = []
  private pos = 0
  private emitted = 0

  constructor (private readonly chunker: Chunker) {}

  /** Append a file; with `isolate`, the file starts and ends on chunk boundaries of its own. */
  add (data: Uint8Array, isolate: boolean): void {
    if (isolate) this.cut()
    this.fileRanges.push({ start: this.pos, size: data.length })
    this.pos += data.length
    for (const c of this.chunker.push(data)) this.emit(c)
    if (isolate) this.cut()
  }

  /** End the current chunk here. */
  cut (): void {
    const last = this.chunker.flush()
    if (last !== undefined) this.emit(last)
  }

  /** Append a chunk that did not come from this cutter's chunker (its bytes are the next `c.length` of the stream). */
  addChunk (c: Uint8Array, fileSizes: number[]): void {
    for (const size of fileSizes) { this.fileRanges.push({ start: this.pos, size }); this.pos += size }
    this.emit(c)
  }

  finish (): LayerChunking {
    this.cut()
    const files = this.fileRanges.map(({ start, size }) => ({ size, first: this.chunkAt(start), last: this.chunkAt(start + size - 1) }))
    return { chunks: this.chunks, files }
  }

  private emit (c: Uint8Array): void {
    this.emitted += c.length
    this.chunks.push(c)
    this.chunkEnds.push(this.emitted)
  }

  /** Index of the chunk holding stream byte `offset` (binary search over chunk ends). */
  private chunkAt (offset: number): number {
    let lo = 0
    let hi = this.chunkEnds.length - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (this.chunkEnds[mid]! > offset) hi = mid
      else lo = mid + 1
    }
    return lo
  }
}

function streamOf (files: SeriesFile[], chunker: Chunker, isolate: (size: number) => boolean): LayerChunking {
  const cutter = new LayerCutter(chunker)
  for (const f of files) cutter.add(f.data, isolate(f.data.length))
  return cutter.finish()
}

/**
 * Small files (< `largeFileBytes`) packed whole into chunks whose ends are
 * content-defined: the small-file bytes run through FastCDC, and a pack ends
 * at the end of the first file in which the chunker found a cut. No small
 * file spans two chunks. Large files are chunked on their own.
 */
function packedSmallFiles (files: SeriesFile[], avgSize: number, largeFileBytes: number): LayerChunking {
  const large = new LayerCutter(cdc(avgSize))
  const packs = new LayerCutter(new FixedSizeChunker(WHOLE))
  const boundary = cdc(avgSize)
  const isLarge: boolean[] = []
  let pack: Uint8Array[] = []
  const closePack = (): void => {
    if (pack.length === 0) return
    packs.addChunk(pack.length === 1 ? pack[0]! : Buffer.concat(pack), pack.map(p => p.length))
    pack = []
    boundary.flush()
  }
  for (const f of files) {
    if (f.data.length >= largeFileBytes) {
      isLarge.push(true)
      large.add(f.data, true)
      continue
    }
    isLarge.push(false)
    pack.push(f.data)
    if (boundary.push(f.data).length > 0) closePack()
  }
  closePack()
  // Merge the two chunk lists into one layer view; file order is kept for the locality figures.
  const a = large.finish()
  const b = packs.finish()
  const offset = a.chunks.length
  let li = 0
  let pi = 0
  const merged = isLarge.map(large => {
    if (large) return a.files[li++]!
    const f = b.files[pi++]!
    return { size: f.size, first: f.first + offset, last: f.last + offset }
  })
  return { chunks: a.chunks.concat(b.chunks), files: merged }
}

/** The candidates, in table order. */
export function candidates (): Candidate[] {
  const list: Candidate[] = [
    { name: 'whole-layer', describe: 'no chunking: one zstd frame per layer (a compressed layer tar, minus headers)', chunkLayer: fs => streamOf(fs, new FixedSizeChunker(WHOLE), () => false) },
    { name: 'whole-file', describe: 'one chunk per file', chunkLayer: fs => streamOf(fs, new FixedSizeChunker(WHOLE), () => true) },
    { name: 'fixed-1m/file', describe: 'fixed 1 MiB chunks, per file', chunkLayer: fs => streamOf(fs, new FixedSizeChunker(MIB), () => true) },
    { name: 'fixed-64k/file', describe: 'fixed 64 KiB chunks, per file', chunkLayer: fs => streamOf(fs, new FixedSizeChunker(64 * KIB), () => true) }
  ]
  for (const avg of [16, 32, 64]) {
    list.push({ name: `cdc-${avg}k/file`, describe: `FastCDC avg ${avg} KiB, restarted at every file`, chunkLayer: fs => streamOf(fs, cdc(avg * KIB), () => true) })
  }
  for (const avg of [16, 32, 64]) {
    list.push({ name: `cdc-${avg}k/stream`, describe: `FastCDC avg ${avg} KiB over the layer's file contents in tar order`, chunkLayer: fs => streamOf(fs, cdc(avg * KIB), () => false) })
  }
  for (const [avg, large] of [[32, 256], [64, 256], [64, 1024]] as const) {
    list.push({
      name: `hybrid-${avg}k/${large}k`,
      describe: `FastCDC avg ${avg} KiB; files >= ${large} KiB chunked on their own, smaller ones share the stream`,
      chunkLayer: fs => streamOf(fs, cdc(avg * KIB), size => size >= large * KIB)
    })
  }
  for (const [avg, large] of [[32, 8], [32, 64], [64, 16], [64, 128]] as const) {
    list.push({
      name: `packed-${avg}k/${large}k`,
      describe: `files < ${large} KiB packed whole into chunks with FastCDC-chosen ends (avg ${avg} KiB); larger files FastCDC avg ${avg} KiB on their own`,
      chunkLayer: fs => packedSmallFiles(fs, avg * KIB, large * KIB)
    })
  }
  return list
}
