/**
 * `layerctl tag`: make one ref name the image another names, under a store
 * lease (src/store/store-leases.ts), so that a concurrent gc can never
 * leave the new ref naming collected objects.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import type { Digest } from '../format/digest.js'
import { formatRef, type ImageRef } from '../format/ref.js'
import type { ObjectStore } from '../store/object-store.js'
import { withStoreLease } from '../store/store-leases.js'
import { loadImage } from './load-image.js'
import { updateRef } from './refs.js'
import { guardReusedImage } from './reuse-guard.js'

/** Point `target` at the manifest `source` names now. Async; NotFoundError for a missing source, ConflictError (see reuse-guard.ts). */
export async function tagImage (store: ObjectStore, source: ImageRef, target: ImageRef): Promise<Digest> {
  const what = `tag ${formatRef(source)} as ${formatRef(target)}`
  return await withStoreLease(store, what, async lease => {
    const image = await loadImage(store, source)
    await guardReusedImage(store, lease, image, what)
    lease.assertValid()
    await updateRef(store, target, image.digest)
    return image.digest
  })
}
