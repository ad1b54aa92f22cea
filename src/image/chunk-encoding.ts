/**
 * Encoding one batch of chunks: sha256 of the plain bytes (the chunk id) and
 * one independent zstd frame each. Used inline and by the worker pool.
 *
 * May import: nothing from the project.
 */
import { createHash } from 'node:crypto'
import { Compressor } from 'zstd-napi'

export interface EncodedBatch {
  digests: string[]
  /** Compressed frames back to back; frame i ends at ends[i]. */
  data: ArrayBuffer
  ends: number[]
}

const compressors = new Map<number, Compressor>()

function compressorFor (level: number): Compressor {
  let c = compressors.get(level)
  if (c === undefined) {
    c = new Compressor()
    c.setParameters({ compressionLevel: level })
    compressors.set(level, c)
  }
  return c
}

/** Encode chunks packed back to back in `plain` (chunk i ends at plainEnds[i]). Sync. */
export function encodeBatch (plain: Uint8Array, plainEnds: readonly number[], level: number): EncodedBatch {
  const compressor = compressorFor(level)
  const digests: string[] = []
  const frames: Buffer[] = []
  let start = 0
  for (const end of plainEnds) {
    const chunk = plain.subarray(start, end)
    digests.push(createHash('sha256').update(chunk).digest('hex'))
    frames.push(compressor.compress(chunk))
    start = end
  }
  const total = frames.reduce((n, f) => n + f.length, 0)
  const data = new ArrayBuffer(total)
  const view = new Uint8Array(data)
  const ends: number[] = []
  let pos = 0
  for (const f of frames) { view.set(f, pos); pos += f.length; ends.push(pos) }
  return { digests, data, ends }
}
