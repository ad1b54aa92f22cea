/**
 * Layers the store already holds, found by their diff_id before reading
 * them: pushing an image whose base layers are already stored (the common
 * case for per-task images) skips those layers entirely — no decompression,
 * no chunking, no hashing.
 *
 * `layer-by-diff/<diff_id hex>` names a TOC. It is only a hint: the TOC is
 * fetched by digest (verified) and must record the same diff_id, and the
 * layer's diff_id is the one the input declares, which reading would verify.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import { NotFoundError } from '../errors.js'
import { digestHex, isDigest, type Digest } from '../format/digest.js'
import { blobKey, layerByDiffKey, layerKey } from '../format/keys.js'
import type { StoreLease } from '../store/store-leases.js'
import type { LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import type { LayerWriteStats } from './layer-writer.js'
import { getToc } from './metadata-objects.js'
import { ZERO_DIFF_ID } from './sources/image-source.js'

/**
 * The stored TOC of the layer with `diffId`, or undefined. Async; a stale or
 * lying hint reads as undefined, and so does a layer whose TOC or blobs a
 * running gc has condemned (`lease`: the layer is then read again).
 */
export async function findLayerByDiffId (store: Pick<ObjectStore, 'get' | 'url'>, diffId: Digest, lease?: Pick<StoreLease, 'isCondemned'>): Promise<{ digest: Digest, toc: LayerToc } | undefined> {
  if (diffId === ZERO_DIFF_ID) return undefined
  let digest: string
  try { digest = (await store.get(layerByDiffKey(digestHex(diffId)))).toString('utf8').trim() } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
  if (!isDigest(digest)) return undefined
  if (lease?.isCondemned(layerKey(digestHex(digest))) === true) return undefined
  try {
    const toc = await getToc(store, digest)
    if (lease !== undefined && toc.blobs.some(b => lease.isCondemned(blobKey(b)))) return undefined
    return toc.diffId === diffId ? { digest, toc } : undefined
  } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
}

/** Record that `tocDigest` is the layer with `diffId`. Async. */
export async function recordLayerByDiffId (store: Pick<ObjectStore, 'put'>, diffId: Digest, tocDigest: Digest): Promise<void> {
  if (diffId === ZERO_DIFF_ID) return
  await store.put(layerByDiffKey(digestHex(diffId)), Buffer.from(tocDigest))
}

/** A stored layer's figures, as if it had been pushed again with everything deduplicated. */
export function storedLayerStats (toc: LayerToc): LayerWriteStats {
  const plainBytes = toc.entries.reduce((n, e) => n + (e.type === 'file' ? e.size : 0), 0)
  return {
    entries: toc.entries.length,
    plainBytes,
    newPlainBytes: 0,
    newStoredBytes: 0,
    dedupPlainBytes: plainBytes,
    storedBytes: toc.chunks.reduce((n, c) => n + c.compressedLength, 0)
  }
}
