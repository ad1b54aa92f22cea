/**
 * Object keys: the store's layout, in one place.
 *
 * | key                          | object                                      |
 * |------------------------------|---------------------------------------------|
 * | blobs/<hex>                  | pack of zstd-compressed chunks (range-read) |
 * | blob-index/<hex>             | JSON list of the chunks in that blob (dedup) |
 * | layers/<hex>                 | zstd(layer TOC), addressed by its sha256    |
 * | manifests/<hex>              | zstd(image manifest), addressed by sha256   |
 * | refs/<urlencoded name>/<tag> | ref record (JSON): current + history        |
 * | layer-by-diff/<diff_id hex>  | the TOC digest of a layer pushed from a tar with that diff_id (a hint: verified on use) |
 * | layer-by-blob/<digest hex>   | the TOC digest of a layer pushed from a stored (compressed) blob with that digest, e.g. a registry layer (a hint: verified on use) |
 * | block-views/<manifest hex>   | the digest of that image's block-view manifest (src/daemon/mounts/block-views.ts) |
 * | tar-splits/<diff_id hex>     | zstd(tar split, tar-split.ts): what export needs besides the TOC to write the layer tar with that diff_id byte for byte (verified on use: the tar's sha256) |
 * | traces/<manifest hex>        | that image's published access trace (JSON; published-trace.ts): chunks to prefetch at mount |
 * | gc/leases/<id>               | a writer's lease: gc waits for it (src/store/store-leases.ts) |
 * | gc/condemned/<gc id>         | the objects a running gc is about to delete |
 * | gc/clock/<id>                | written to read the store's clock |
 *
 * Every content-addressed object is verified against its key on read.
 */
import type { ImageRef } from './ref.js'

export const BLOBS_PREFIX = 'blobs/'
export const BLOB_INDEX_PREFIX = 'blob-index/'
export const LAYERS_PREFIX = 'layers/'
export const MANIFESTS_PREFIX = 'manifests/'
export const REFS_PREFIX = 'refs/'
export const LAYER_BY_DIFF_PREFIX = 'layer-by-diff/'
export const LAYER_BY_BLOB_PREFIX = 'layer-by-blob/'
export const BLOCK_VIEWS_PREFIX = 'block-views/'
export const TRACES_PREFIX = 'traces/'
export const TAR_SPLITS_PREFIX = 'tar-splits/'
/** Hints (`layer-by-diff/`, `layer-by-blob/`, …): every key under a prefix starting with this names a TOC digest. */
export const LAYER_HINT_PREFIX = 'layer-by-'
/** Garbage collection's coordination objects; never content, never collected as garbage. */
export const GC_PREFIX = 'gc/'
export const GC_LEASES_PREFIX = 'gc/leases/'
export const GC_CONDEMNED_PREFIX = 'gc/condemned/'
export const GC_CLOCK_PREFIX = 'gc/clock/'

export const blobKey = (hex: string): string => BLOBS_PREFIX + hex
export const blobIndexKey = (hex: string): string => BLOB_INDEX_PREFIX + hex
export const layerKey = (hex: string): string => LAYERS_PREFIX + hex
export const manifestKey = (hex: string): string => MANIFESTS_PREFIX + hex
/** Key of the published access trace of the manifest with this sha256 hex. */
export const traceKey = (manifestHex: string): string => TRACES_PREFIX + manifestHex
/** Key of the tar split (tar-split.ts) of the layer tar whose diff_id has this sha256 hex. */
export const tarSplitKey = (diffHex: string): string => TAR_SPLITS_PREFIX + diffHex
export const layerByDiffKey = (diffHex: string): string => LAYER_BY_DIFF_PREFIX + diffHex
/** Key of the hint for the layer whose stored blob (OCI descriptor digest: compressed bytes) has this sha256 hex. */
export const layerByBlobKey = (blobHex: string): string => LAYER_BY_BLOB_PREFIX + blobHex
export const refKey = (ref: ImageRef): string => `${REFS_PREFIX}${encodeURIComponent(ref.name)}/${ref.tag}`

/** Inverse of refKey for listings; undefined for keys that are not refs. */
export function refFromKey (key: string): ImageRef | undefined {
  if (!key.startsWith(REFS_PREFIX)) return undefined
  const rest = key.slice(REFS_PREFIX.length)
  const slash = rest.indexOf('/')
  if (slash <= 0 || slash === rest.length - 1) return undefined
  try { return { name: decodeURIComponent(rest.slice(0, slash)), tag: rest.slice(slash + 1) } } catch { return undefined }
}
