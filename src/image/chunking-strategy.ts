/**
 * How push cuts a layer's file contents into chunks. Chosen by measurement
 * (bench/chunking.ts; figures in the README):
 *
 * - `stream`: the contents of all files of a layer, concatenated in tar
 *   order, go through one content-defined chunker, so small files share
 *   chunks (fewer, better-compressed chunks) and boundaries resync after a
 *   change;
 * - `per-file`: the chunker restarts at every file;
 * - `hybrid`: files of at least `largeFileBytes` are chunked on their own,
 *   smaller ones share the stream.
 *
 * Pure: no fs, network or native code.
 */
import { DEFAULT_FASTCDC_OPTIONS, FastCdcChunker, type Chunker } from '../format/chunker.js'

export interface ChunkingStrategy {
  kind: 'stream' | 'per-file' | 'hybrid'
  minSize: number
  avgSize: number
  maxSize: number
  /** hybrid only: files at least this large get chunk boundaries of their own. */
  largeFileBytes?: number
}

/**
 * Per-file FastCDC, 8/32/128 KiB: measured best on the Debian series
 * (bench/chunking.ts, README): the smallest upload for a new version, and a
 * file read fetches only that file's chunks (stream chunking fetched 1.9-4.7x
 * the bytes), for 1.7% more stored bytes than stream chunking.
 */
export const DEFAULT_CHUNKING: ChunkingStrategy = { kind: 'per-file', ...DEFAULT_FASTCDC_OPTIONS }

export function newChunker (s: ChunkingStrategy): Chunker {
  return new FastCdcChunker({ minSize: s.minSize, avgSize: s.avgSize, maxSize: s.maxSize })
}

/** Does a file of `size` bytes start and end on chunk boundaries of its own? */
export function isolatesFile (s: ChunkingStrategy, size: number): boolean {
  switch (s.kind) {
    case 'per-file': return true
    case 'stream': return false
    case 'hybrid': return size >= (s.largeFileBytes ?? s.maxSize)
  }
}
