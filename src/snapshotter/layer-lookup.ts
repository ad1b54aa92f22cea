/**
 * Which layerd layer a containerd layer is, from the labels containerd
 * (CRI, nerdctl, `layerctl containerd pull`) puts on a Prepare:
 *
 * 1. `containerd.io/snapshot/layerd.layer`: the TOC digest itself
 *    (`layerctl containerd pull` of a layerd image knows it);
 * 2. `containerd.io/snapshot/cri.layer-digest`: the layer's blob digest in
 *    its registry, through the store's `layer-by-blob/<hex>` index that
 *    pushes from registries and OCI layouts record (src/image/known-layers.ts);
 * 3. the same digest through `layer-by-diff/<hex>`: a layer descriptor of
 *    an uncompressed tar has its diff_id as digest (the descriptors
 *    `layerctl containerd pull` synthesizes for images pushed from files).
 *
 * Every index entry is a hint: the TOC is read by digest (verified), and
 * the caller checks its diff_id against the chain ID containerd asked for.
 *
 * May import: src/errors.ts, src/format/, src/store/, src/image/.
 */
import { NotFoundError } from '../errors.js'
import { isDigest, type Digest } from '../format/digest.js'
import type { ObjectStore } from '../store/object-store.js'
import { findLayerByBlob, findLayerByDiffId } from '../image/known-layers.js'
import { getToc } from '../image/metadata-objects.js'
import type { LayerToc } from '../format/toc.js'

export const LAYERD_LAYER_LABEL = 'containerd.io/snapshot/layerd.layer'
export const CRI_LAYER_DIGEST_LABEL = 'containerd.io/snapshot/cri.layer-digest'
export interface FoundLayer { digest: Digest, toc: LayerToc, via: 'label' | 'layer-by-blob' | 'layer-by-diff' }

async function tocOrUndefined (loadToc: (digest: Digest) => Promise<LayerToc>, digest: Digest): Promise<{ digest: Digest, toc: LayerToc } | undefined> {
  try { return { digest, toc: await loadToc(digest) } } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
}

/** The layer `labels` name, by the first rule that finds one (see above), or undefined; the label's TOC is read with `loadToc` (the daemon's goes through its metadata cache). Async; store failures throw. */
export async function findLayerForLabels (store: Pick<ObjectStore, 'get' | 'url'>, labels: Record<string, string>, loadToc: (digest: Digest) => Promise<LayerToc> = async d => await getToc(store, d)): Promise<FoundLayer | undefined> {
  const explicit = labels[LAYERD_LAYER_LABEL]
  if (explicit !== undefined && isDigest(explicit)) {
    const found = await tocOrUndefined(loadToc, explicit)
    if (found !== undefined) return { ...found, via: 'label' }
  }
  const blob = labels[CRI_LAYER_DIGEST_LABEL]
  if (blob === undefined || !isDigest(blob)) return undefined
  const byBlob = await findLayerByBlob(store, blob)
  if (byBlob !== undefined) return { ...byBlob, via: 'layer-by-blob' }
  const byDiff = await findLayerByDiffId(store, blob)
  return byDiff === undefined ? undefined : { ...byDiff, via: 'layer-by-diff' }
}
