/**
 * Reusing stored objects under a store lease (src/store/store-leases.ts):
 * a writer that names objects it did not write itself (commit's base image,
 * rebase's layers, tag's manifest) makes sure a running gc will not delete
 * them. A condemned TOC or manifest is written again with the same bytes,
 * which gives it a modification time after the condemnation, and gc keeps
 * such objects; a condemned blob cannot be rewritten (its chunks are not
 * here), so that is a ConflictError: the image was removed and is being
 * collected.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import { ConflictError } from '../errors.js'
import { digestHex, type Digest } from '../format/digest.js'
import { blobKey, layerKey, manifestKey } from '../format/keys.js'
import type { LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import type { StoreLease } from '../store/store-leases.js'
import { verifyObject } from './metadata-objects.js'

type Store = Pick<ObjectStore, 'get' | 'put' | 'url'>

/** Write the content-addressed object `key` again, byte for byte, when it is condemned. Async. */
async function refreshIfCondemned (store: Store, lease: Pick<StoreLease, 'isCondemned'>, key: string, digest: Digest): Promise<void> {
  if (!lease.isCondemned(key)) return
  const bytes = await store.get(key)
  verifyObject(bytes, digest, key, store.url)
  await store.put(key, bytes)
}

/**
 * Guard the layers `what` reuses (TOC digest with its decoded TOC). Async;
 * throws ConflictError naming the layer and blob when a blob is condemned.
 */
export async function guardReusedLayers (store: Store, lease: Pick<StoreLease, 'isCondemned'>, layers: ReadonlyArray<{ digest: Digest, toc: LayerToc }>, what: string): Promise<void> {
  for (const { digest, toc } of layers) {
    const blob = toc.blobs.find(b => lease.isCondemned(blobKey(b)))
    if (blob !== undefined) {
      throw new ConflictError(`${what}: layer ${digest} keeps its chunks in blob ${blob}, which a running \`layerctl gc store\` is deleting ` +
        `(no ref named it when gc marked); nothing was committed: push that image again first`)
    }
    await refreshIfCondemned(store, lease, layerKey(digestHex(digest)), digest)
  }
}

/** Guard a whole stored image: its layers, then its manifest. Async; ConflictError as above. */
export async function guardReusedImage (store: Store, lease: Pick<StoreLease, 'isCondemned'>,
  image: { digest: Digest, manifest: { layers: ReadonlyArray<{ digest: Digest }> }, tocs: readonly LayerToc[] }, what: string): Promise<void> {
  await guardReusedLayers(store, lease, image.manifest.layers.map((l, i) => ({ digest: l.digest, toc: image.tocs[i]! })), what)
  await refreshIfCondemned(store, lease, manifestKey(digestHex(image.digest)), image.digest)
}
