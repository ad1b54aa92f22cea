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
 * `layer-by-blob/<blob digest hex>` names the TOC of a layer pushed from a
 * stored blob (compressed, as a registry or OCI layout holds it) with that
 * digest, recorded only after the blob was read and verified. It lets a
 * layer be skipped before its diff_id is even known (and lets a remote
 * snapshotter find a layer by `containerd.io/snapshot/cri.layer-digest`).
 * The same checks apply: the TOC is verified, and must have the diff_id the
 * input declares, when it declares one.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import { NotFoundError } from '../errors.js'
import { digestHex, isDigest, type Digest } from '../format/digest.js'
import { layerByBlobKey, layerByDiffKey } from '../format/keys.js'
import type { LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import type { LayerWriteStats } from './layer-writer.js'
import { getToc } from './metadata-objects.js'
import { ZERO_DIFF_ID } from './sources/image-source.js'

/** The stored TOC of the layer with `diffId`, or undefined. Async; a stale or lying hint reads as undefined. */
export async function findLayerByDiffId (store: Pick<ObjectStore, 'get' | 'url'>, diffId: Digest): Promise<KnownLayer | undefined> {
  if (diffId === ZERO_DIFF_ID) return undefined
  return await followHint(store, layerByDiffKey(digestHex(diffId)), diffId)
}

/**
 * The stored TOC of the layer pushed from the blob `blobDigest`, or
 * undefined. When `diffId` is given, the TOC must have it. Async; a stale or
 * lying hint reads as undefined.
 */
export async function findLayerByBlob (store: Pick<ObjectStore, 'get' | 'url'>, blobDigest: Digest, diffId?: Digest): Promise<KnownLayer | undefined> {
  return await followHint(store, layerByBlobKey(digestHex(blobDigest)), diffId)
}

/**
 * The layer for an input's declared blob digest, else its declared diff_id.
 * The blob hint is used only together with a declared diff_id (it may have
 * been recorded from a manifest's claim that blob and diff_id belong
 * together, when the layer was skipped by its diff_id). Async.
 */
export async function findKnownLayer (store: Pick<ObjectStore, 'get' | 'url'>, declared: { blobDigest?: Digest | undefined, diffId?: Digest | undefined }): Promise<(KnownLayer & { by: 'blob' | 'diff' }) | undefined> {
  if (declared.blobDigest !== undefined && declared.diffId !== undefined) {
    const known = await findLayerByBlob(store, declared.blobDigest, declared.diffId)
    if (known !== undefined) return { ...known, by: 'blob' }
  }
  if (declared.diffId !== undefined) {
    const known = await findLayerByDiffId(store, declared.diffId)
    if (known !== undefined) return { ...known, by: 'diff' }
  }
  return undefined
}

export interface KnownLayer { digest: Digest, toc: LayerToc }

async function followHint (store: Pick<ObjectStore, 'get' | 'url'>, key: string, diffId: Digest | undefined): Promise<KnownLayer | undefined> {
  let digest: string
  try { digest = (await store.get(key)).toString('utf8').trim() } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
  if (!isDigest(digest)) return undefined
  try {
    const toc = await getToc(store, digest)
    return diffId === undefined || toc.diffId === diffId ? { digest, toc } : undefined
  } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
}

/** Record that `tocDigest` is the layer read from the stored blob `blobDigest` (after verifying it). Async. */
export async function recordLayerByBlob (store: Pick<ObjectStore, 'put'>, blobDigest: Digest, tocDigest: Digest): Promise<void> {
  await store.put(layerByBlobKey(digestHex(blobDigest)), Buffer.from(tocDigest))
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
