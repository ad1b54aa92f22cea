/**
 * Content-addressed metadata objects (layer TOCs and image manifests): their
 * on-store form is zstd(canonical JSON), addressed by the sha256 of the
 * stored bytes. Reads verify the digest before decoding, so a store that
 * lies is caught here, once, for every caller.
 *
 * May import: src/errors.ts, src/format/, src/store/.
 */
import { Compressor, Decompressor } from 'zstd-napi'
import { CorruptObjectError } from '../errors.js'
import { digestHex, sha256Digest, type Digest } from '../format/digest.js'
import { layerKey, manifestKey } from '../format/keys.js'
import { decodeManifest, encodeJson, type ImageManifest } from '../format/manifest.js'
import { decodeToc, encodeToc, type LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'

/** Level 6, not 9: on the python image the TOC is 1.3% larger and compresses in 28 ms, not 46, and blob indexes come out smaller (bench/push-throughput.ts). */
const METADATA_ZSTD_LEVEL = 6
/** A TOC or manifest larger than this once decompressed is refused (hostile store). */
export const MAX_METADATA_BYTES = 1024 ** 3

let compressor: Compressor | undefined
let decompressor: Decompressor | undefined

export function compressMetadata (plain: Uint8Array): Buffer {
  if (compressor === undefined) {
    compressor = new Compressor()
    compressor.setParameters({ compressionLevel: METADATA_ZSTD_LEVEL })
  }
  return compressor.compress(plain)
}

export function decompressMetadata (stored: Uint8Array, source: string): Buffer {
  decompressor ??= new Decompressor()
  try {
    // The frame header carries the content size; refuse absurd ones before allocating.
    const out = decompressor.decompress(stored)
    if (out.length > MAX_METADATA_BYTES) throw new Error(`decompresses to ${out.length} bytes`)
    return out
  } catch (err) {
    throw new CorruptObjectError(`${source} does not decompress: ${(err as Error).message}`, { cause: err })
  }
}

/** Check stored bytes against the digest they were fetched by. Throws CorruptObjectError naming key and store. */
export function verifyObject (bytes: Uint8Array, expected: Digest, key: string, storeUrl: string): void {
  const actual = sha256Digest(bytes)
  if (actual !== expected) {
    throw new CorruptObjectError(`object ${key} in store ${storeUrl} is corrupt: its sha256 is ${actual}, expected ${expected}`)
  }
}

export interface StoredObject { digest: Digest, bytes: Buffer }

/** Encode a TOC into its stored form without writing it. Sync. */
export function encodeTocObject (toc: LayerToc): StoredObject {
  const bytes = compressMetadata(encodeToc(toc))
  return { digest: sha256Digest(bytes), bytes }
}

export function encodeManifestObject (manifest: ImageManifest): StoredObject {
  const bytes = compressMetadata(encodeJson(manifest))
  return { digest: sha256Digest(bytes), bytes }
}

/** Decode already-verified stored TOC bytes. Sync; throws CorruptObjectError. */
export function decodeTocObject (bytes: Uint8Array, digest: Digest): LayerToc {
  return decodeToc(decompressMetadata(bytes, `layer ${digest}`), digest)
}

export function decodeManifestObject (bytes: Uint8Array, digest: Digest): ImageManifest {
  return decodeManifest(decompressMetadata(bytes, `manifest ${digest}`), digest)
}

/** Fetch, verify and decode a layer TOC. Async; NotFoundError, StoreUnavailableError, CorruptObjectError. */
export async function getToc (store: Pick<ObjectStore, 'get' | 'url'>, digest: Digest): Promise<LayerToc> {
  const key = layerKey(digestHex(digest))
  const bytes = await store.get(key)
  verifyObject(bytes, digest, key, store.url)
  return decodeTocObject(bytes, digest)
}

export async function getManifest (store: Pick<ObjectStore, 'get' | 'url'>, digest: Digest): Promise<ImageManifest> {
  const key = manifestKey(digestHex(digest))
  const bytes = await store.get(key)
  verifyObject(bytes, digest, key, store.url)
  return decodeManifestObject(bytes, digest)
}
