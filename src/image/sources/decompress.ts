/**
 * Layer compression: detection by magic bytes, and streaming decompressors
 * that respect backpressure, so a decompression bomb never holds more than
 * one output buffer in memory before the byte counters downstream see it.
 *
 * zstd-napi's own DecompressStream pushes a whole input chunk's output at
 * once (a 64 KiB chunk of a bomb is gigabytes), so zstd is decoded here with
 * its low-level streaming context, one 128 KiB output buffer per step. Node's
 * gunzip Transform already waits for its reader between output buffers.
 *
 * May import: src/errors.ts.
 */
import { createGunzip } from 'node:zlib'
import type { Transform } from 'node:stream'
import zstdBinding from 'zstd-napi/binding.js'
import { BadInputError, UnsupportedError } from '../../errors.js'

export type Compression = 'none' | 'gzip' | 'zstd'

/** Bytes needed by {@link detectCompression}. */
export const COMPRESSION_MAGIC_BYTES = 6

const GUNZIP_OUT_BYTES = 128 * 1024
const ZSTD_MAGIC = [0x28, 0xb5, 0x2f, 0xfd]
const GZIP_MAGIC = [0x1f, 0x8b]
const XZ_MAGIC = [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]
const BZIP2_MAGIC = [0x42, 0x5a, 0x68]

function startsWith (head: Uint8Array, magic: number[]): boolean {
  return head.length >= magic.length && magic.every((b, i) => head[i] === b)
}

/**
 * The compression of a stream from its first bytes. Sync. Throws
 * UnsupportedError for xz and bzip2 (recognised, but not layer formats layerd
 * reads); anything unrecognised is taken as uncompressed (the tar reader then
 * says whether it is a tar).
 */
export function detectCompression (head: Uint8Array, what: string): Compression {
  if (startsWith(head, GZIP_MAGIC)) return 'gzip'
  // zstd frames, or a zstd skippable frame (magic 0x184D2A5?, little-endian).
  if (startsWith(head, ZSTD_MAGIC) || (head.length >= 4 && (head[0]! & 0xf0) === 0x50 && head[1] === 0x2a && head[2] === 0x4d && head[3] === 0x18)) return 'zstd'
  if (startsWith(head, XZ_MAGIC)) throw new UnsupportedError(`${what} is xz-compressed; layerd reads plain, gzip or zstd tars (decompress it with unxz first)`)
  if (startsWith(head, BZIP2_MAGIC) && head[3] !== undefined && head[3] >= 0x31 && head[3] <= 0x39) {
    throw new UnsupportedError(`${what} is bzip2-compressed; layerd reads plain, gzip or zstd tars (decompress it with bunzip2 first)`)
  }
  return 'none'
}

/** A gunzip Transform for a pipeline; its errors carry zlib codes (Z_DATA_ERROR, Z_BUF_ERROR), see {@link describeDecompressError}. */
export function gunzipStream (): Transform {
  // 128 KiB output buffers (zlib defaults to 16 KiB): fewer, larger chunks downstream.
  return createGunzip({ chunkSize: GUNZIP_OUT_BYTES })
}

/**
 * Decode a zstd stream (one or more frames). Async generator: yields at most
 * ZSTD_OUT_BYTES per step and only continues when the consumer asks, so the
 * output is bounded by the consumer. Throws BadInputError for corrupt or
 * truncated data, naming `what`.
 */
export async function * zstdDecompress (source: AsyncIterable<Uint8Array>, what: string): AsyncGenerator<Buffer> {
  const dctx = new zstdBinding.DCtx()
  const outBytes = zstdBinding.dStreamOutSize()
  let inFrame = false
  let consumedTotal = 0
  for await (const input of source) {
    let src: Uint8Array = input
    for (;;) {
      const dst = Buffer.allocUnsafe(outBytes)
      let ret: number, produced: number, consumed: number
      try {
        [ret, produced, consumed] = dctx.decompressStream(dst, src)
      } catch (err) {
        throw new BadInputError(`${what}: zstd data is corrupt: ${(err as Error).message}`, { cause: err })
      }
      consumedTotal += consumed
      src = src.subarray(consumed)
      if (produced > 0) yield dst.subarray(0, produced)
      if (src.length === 0 && (produced < dst.length || ret === 0)) {
        inFrame = ret !== 0
        break
      }
    }
  }
  if (inFrame) throw new BadInputError(`${what}: unexpected end of zstd data after ${consumedTotal} compressed bytes (truncated?)`)
}

/** A one-line description of a decompressor or tar-stream failure, or undefined when `err` is not one. */
export function describeDecompressError (err: unknown): string | undefined {
  const code = (err as { code?: unknown }).code
  if (typeof code !== 'string' || !code.startsWith('Z_')) return undefined
  const message = (err as Error).message
  if (code === 'Z_BUF_ERROR') return `unexpected end of gzip data (truncated?): ${message}`
  return `gzip data is corrupt: ${message}`
}
