/**
 * Blob index objects (`blob-index/<blob hex>`): the list of chunks a blob
 * holds, written right after the blob itself. They make every sealed blob
 * reusable for dedup by any later push, from any node — including the rerun
 * of a push that died before writing its TOC.
 *
 * Stored form: zstd(JSON { v: 1, chunks: [[digest hex, offset, compressedLength, length], …] }).
 *
 * May import: src/errors.ts, src/format/, src/store/.
 */
import { CorruptObjectError } from '../errors.js'
import { isHex256 } from '../format/digest.js'
import { blobIndexKey } from '../format/keys.js'
import { encodeJson } from '../format/manifest.js'
import type { ObjectStore } from '../store/object-store.js'
import { compressMetadata, decompressMetadata } from './metadata-objects.js'

/** One chunk inside a blob: where its compressed frame is, and its plain length. */
export interface BlobChunk { digest: string, offset: number, compressedLength: number, length: number }

export function encodeBlobIndex (chunks: readonly BlobChunk[]): Buffer {
  return compressMetadata(encodeJson({ v: 1, chunks: chunks.map(c => [c.digest, c.offset, c.compressedLength, c.length]) }))
}

/** Parse a blob index; throws CorruptObjectError naming the blob. */
export function decodeBlobIndex (stored: Uint8Array, blob: string): BlobChunk[] {
  const source = `blob index ${blob}`
  let doc: any
  try { doc = JSON.parse(decompressMetadata(stored, source).toString('utf8')) } catch (err) {
    if (err instanceof CorruptObjectError) throw err
    throw new CorruptObjectError(`${source} is not valid JSON`, { cause: err })
  }
  if (doc?.v !== 1 || !Array.isArray(doc.chunks)) throw new CorruptObjectError(`${source} is malformed`)
  return doc.chunks.map((c: unknown, i: number) => {
    if (!Array.isArray(c) || c.length !== 4 || !isHex256(c[0]) ||
      !c.slice(1).every(n => Number.isSafeInteger(n) && (n as number) >= 0)) {
      throw new CorruptObjectError(`${source}: chunk ${i} is malformed`)
    }
    return { digest: c[0], offset: c[1], compressedLength: c[2], length: c[3] }
  })
}

export async function putBlobIndex (store: Pick<ObjectStore, 'put'>, blob: string, chunks: readonly BlobChunk[]): Promise<number> {
  const bytes = encodeBlobIndex(chunks)
  await store.put(blobIndexKey(blob), bytes)
  return bytes.length
}
