/**
 * `layerctl rebase NAME:TAG --onto BASE:TAG`: put an image's own layers on
 * top of the newest version of its base, re-using every layer object as it
 * is: nothing but a manifest and the ref are written.
 *
 * Which of the image's layers came from the base is found by matching layer
 * digests: the image's lowest layers must equal some version of BASE:TAG (its
 * ref history), or the base recorded in the manifest at push time.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import { BadInputError, NotFoundError } from '../errors.js'
import { digestHex, type Digest } from '../format/digest.js'
import { manifestKey } from '../format/keys.js'
import { MANIFEST_MEDIA_TYPE, type ImageManifest } from '../format/manifest.js'
import { mergeLayers } from '../format/merge.js'
import { formatRef, type ImageRef } from '../format/ref.js'
import type { ObjectStore } from '../store/object-store.js'
import { loadImage } from './load-image.js'
import { encodeManifestObject, getManifest, getToc } from './metadata-objects.js'
import { readRef, updateRef } from './refs.js'
import { guardReusedLayers } from './reuse-guard.js'
import { withStoreLease, type StoreLease } from '../store/store-leases.js'

export interface RebaseResult {
  manifest: Digest
  /** Layers of the old base that were replaced, and layers of the new base put under the image's own. */
  oldBaseLayers: number
  newBaseLayers: number
  ownLayers: number
  /** False when the image already sat on the newest base: nothing was written. */
  changed: boolean
}

type Store = Pick<ObjectStore, 'get' | 'put' | 'url' | 'list' | 'delete'>

/** Rebase under a store lease: the layers it reuses are guarded and the ref is written only while the lease is fresh (src/store/store-leases.ts). */
export async function rebaseImage (store: Store, ref: ImageRef, onto: ImageRef): Promise<RebaseResult> {
  return await withStoreLease(store, `rebase of ${formatRef(ref)} onto ${formatRef(onto)}`, async lease => await rebaseLeased(store, lease, ref, onto))
}

async function rebaseLeased (store: Store, lease: StoreLease, ref: ImageRef, onto: ImageRef): Promise<RebaseResult> {
  const image = await loadImage(store, ref)
  const record = await readRef(store, onto)
  if (record === undefined) throw new NotFoundError(`cannot rebase ${formatRef(ref)}: base image ${formatRef(onto)} not found in store ${store.url}`)
  const layers = image.manifest.layers.map(l => l.digest)
  let oldBase: ImageManifest | undefined
  for (const version of record.history) {
    // `gc store --keep-history N` collects older versions but leaves them listed: skip those.
    const m = await getManifest(store, version.manifest).catch((err: unknown) => { if (err instanceof NotFoundError) return undefined; throw err })
    if (m === undefined) continue
    if (m.layers.length <= layers.length && m.layers.every((l, i) => l.digest === layers[i]) &&
      (oldBase === undefined || m.layers.length > oldBase.layers.length)) oldBase = m
  }
  const baseCount = oldBase?.layers.length ?? (image.manifest.base?.ref === formatRef(onto) ? image.manifest.base.layers : undefined)
  if (baseCount === undefined) {
    throw new BadInputError(`cannot rebase ${formatRef(ref)} onto ${formatRef(onto)}: its lowest layers match no version of ${formatRef(onto)}`)
  }
  const newBaseDigest = record.history[0]!.manifest
  const newBase = await getManifest(store, newBaseDigest)
  const own = image.manifest.layers.slice(baseCount)
  const result = { oldBaseLayers: baseCount, newBaseLayers: newBase.layers.length, ownLayers: own.length }
  if (newBase.layers.length === baseCount && newBase.layers.every((l, i) => l.digest === layers[i])) {
    return { manifest: image.digest, ...result, changed: false }
  }
  const tocs = [...await Promise.all(newBase.layers.map(async l => await getToc(store, l.digest))), ...image.tocs.slice(baseCount)]
  const conflict = mergeLayers(tocs).conflicts[0]
  if (conflict !== undefined) {
    throw new BadInputError(`cannot rebase ${formatRef(ref)} onto ${formatRef(onto)}: layer ${conflict.layer + 1} entry ${JSON.stringify(conflict.path)}: ${conflict.reason}`)
  }
  const allLayers = [...newBase.layers, ...own]
  const ownHistory = (image.manifest.config.history ?? []).slice(oldBase?.config.history?.length ?? 0)
  const manifest: ImageManifest = {
    mediaType: MANIFEST_MEDIA_TYPE,
    layers: allLayers,
    config: {
      ...image.manifest.config,
      rootfs: { type: 'layers', diff_ids: allLayers.map(l => l.diffId) },
      history: [...(newBase.config.history ?? []), ...ownHistory]
    },
    base: { ref: formatRef(onto), manifest: newBaseDigest, layers: newBase.layers.length }
  }
  await guardReusedLayers(store, lease, allLayers.map((l, i) => ({ digest: l.digest, toc: tocs[i]! })), `rebase of ${formatRef(ref)}`)
  const object = encodeManifestObject(manifest)
  await store.put(manifestKey(digestHex(object.digest)), object.bytes)
  lease.assertValid()
  await updateRef(store, ref, object.digest)
  return { manifest: object.digest, ...result, changed: true }
}
