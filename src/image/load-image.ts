/**
 * Loading an image's metadata: ref → manifest → layer TOCs, verified, via an
 * optional node-local metadata cache (the chunk cache's metadata side), so
 * a warm node reads nothing from the store to mount or export an image.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import { isDigest, digestHex, type Digest } from '../format/digest.js'
import { layerKey, manifestKey } from '../format/keys.js'
import type { ImageManifest } from '../format/manifest.js'
import { parseRef, type ImageRef } from '../format/ref.js'
import type { LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import { decodeManifestObject, decodeTocObject, verifyObject } from './metadata-objects.js'
import { resolveRef } from './refs.js'

/** The slice of the node cache that holds metadata objects. Entries are only ever put after verification. */
export interface MetadataCache {
  getMeta: (key: string) => Buffer | undefined
  putMeta: (key: string, bytes: Uint8Array, opts: { pinned: boolean }) => void | Promise<void>
}

export interface LoadedImage {
  /** The ref it was loaded by, when it was loaded by name. */
  ref?: ImageRef
  digest: Digest
  manifest: ImageManifest
  tocs: LayerToc[]
  /** Compressed bytes of metadata read from the store (0 when all came from the cache). */
  fetchedBytes: number
}

export interface LoadImageOptions {
  cache?: MetadataCache
  /** Pin the metadata in the cache (images that are mounted). */
  pin?: boolean
  /** Decoded TOCs the caller already holds, by layer digest: used as they are, neither read nor decoded again. */
  decodedToc?: (layerDigest: Digest) => LayerToc | undefined
}

/**
 * Load `image` (`NAME:TAG` or a manifest digest). Async. Throws NotFoundError
 * naming the image and store, CorruptObjectError for objects that fail
 * verification, StoreUnavailableError.
 */
export async function loadImage (store: Pick<ObjectStore, 'get' | 'url'>, image: string | ImageRef, opts: LoadImageOptions = {}): Promise<LoadedImage> {
  const ref = typeof image === 'string' ? (isDigest(image) ? undefined : parseRef(image)) : image
  const digest = ref === undefined ? image as Digest : await resolveRef(store, ref)
  const fetch = verifiedFetcher(store, opts)
  const manifest = decodeManifestObject(await fetch.get(manifestKey(digestHex(digest)), digest), digest)
  const tocs = await loadTocs(fetch, manifest.layers.map(l => l.digest), opts)
  return { ref, digest, manifest, tocs, fetchedBytes: fetch.fetchedBytes }
}

/**
 * Load the TOCs of `layers` (no manifest: a chain of layers named by
 * digest, as the containerd snapshotter mounts them), through the same
 * metadata cache. Async; errors as loadImage().
 */
export async function loadLayerTocs (store: Pick<ObjectStore, 'get' | 'url'>, layers: readonly Digest[], opts: LoadImageOptions = {}): Promise<LayerToc[]> {
  return await loadTocs(verifiedFetcher(store, opts), layers, opts)
}

async function loadTocs (fetch: VerifiedFetcher, layers: readonly Digest[], opts: LoadImageOptions): Promise<LayerToc[]> {
  return await Promise.all(layers.map(async l => opts.decodedToc?.(l) ?? decodeTocObject(await fetch.get(layerKey(digestHex(l)), l), l)))
}

interface VerifiedFetcher { get: (key: string, d: Digest) => Promise<Buffer>, fetchedBytes: number }

/** Metadata objects from the cache, else from the store (verified, then cached); counts store bytes. */
function verifiedFetcher (store: Pick<ObjectStore, 'get' | 'url'>, opts: LoadImageOptions): VerifiedFetcher {
  const f: VerifiedFetcher = {
    fetchedBytes: 0,
    get: async (key, d) => {
      const cached = opts.cache?.getMeta(key)
      if (cached !== undefined) return cached
      const bytes = await store.get(key)
      verifyObject(bytes, d, key, store.url)
      f.fetchedBytes += bytes.length
      await opts.cache?.putMeta(key, bytes, { pinned: opts.pin ?? false })
      return bytes
    }
  }
  return f
}
