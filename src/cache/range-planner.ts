/**
 * Range planning: turn a set of missing chunks into as few range GETs as
 * sensible. Chunks of one blob are sorted by offset and merged into one run
 * while the gap to the next chunk is at most `maxGapBytes` (the gap is read
 * and thrown away: cheaper than another request) and the run stays within
 * `maxRunBytes` (bounded memory and latency per GET). A chunk larger than
 * `maxRunBytes` gets a run of its own.
 *
 * Pure: no I/O. May import: src/format/toc.ts (types).
 */
import type { ChunkRef } from '../format/toc.js'

export interface RangeRun<C extends ChunkRef = ChunkRef> {
  blob: string
  /** First byte of the GET in the blob, and its length. */
  offset: number
  length: number
  /** The chunks the run covers, by offset. */
  chunks: C[]
}

export interface RangePlanOptions {
  maxGapBytes: number
  maxRunBytes: number
}

/** 64 KiB of unwanted bytes costs less than a second request, even on loopback S3. */
export const DEFAULT_MAX_GAP_BYTES = 64 * 1024
export const DEFAULT_MAX_RUN_BYTES = 8 * 1024 * 1024

/** Group `chunks` into runs. Sync, pure; the input order does not matter. */
export function planRanges<C extends ChunkRef> (chunks: readonly C[], options: RangePlanOptions): Array<RangeRun<C>> {
  const byBlob = new Map<string, C[]>()
  for (const c of chunks) {
    const list = byBlob.get(c.blob)
    if (list === undefined) byBlob.set(c.blob, [c])
    else list.push(c)
  }
  const runs: Array<RangeRun<C>> = []
  for (const [blob, list] of byBlob) {
    list.sort((a, b) => a.offset - b.offset)
    let run: RangeRun<C> | undefined
    let runEnd = 0
    for (const c of list) {
      const end = c.offset + c.compressedLength
      const fits = run !== undefined &&
        c.offset - runEnd <= options.maxGapBytes &&
        Math.max(end, runEnd) - run.offset <= options.maxRunBytes
      if (fits) {
        run!.chunks.push(c)
        runEnd = Math.max(runEnd, end)
        run!.length = runEnd - run!.offset
      } else {
        run = { blob, offset: c.offset, length: c.compressedLength, chunks: [c] }
        runEnd = end
        runs.push(run)
      }
    }
  }
  return runs
}
