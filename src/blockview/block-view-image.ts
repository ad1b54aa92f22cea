/**
 * A block view published as an image of its own: a manifest whose single
 * layer is the block view's one-file layer (`disk.raw`) and a ref naming it.
 * Any layerd mount of that ref then shows `<mountpoint>/disk.raw`, fetched
 * lazily chunk by chunk, which is what a VM boots from. Until layerd exposes
 * `manifest.blockView` of an image directly, this is how a block view gets
 * onto a FUSE mount (the VM tests and bench use it).
 *
 * May import: src/errors.ts, src/format/, src/store/, src/state/, src/image/, this folder.
 */
import { digestHex, type Digest } from '../format/digest.js'
import { manifestKey } from '../format/keys.js'
import { MANIFEST_MEDIA_TYPE, type ImageManifest, type OciImageConfig } from '../format/manifest.js'
import { formatRef, type ImageRef } from '../format/ref.js'
import { withStoreLease } from '../store/store-leases.js'
import { encodeManifestObject } from '../image/metadata-objects.js'
import { updateRef } from '../image/refs.js'
import { pushBlockView, type PushBlockViewOptions, type PushedBlockView } from './push-block-view.js'

export interface PushedBlockViewImage extends PushedBlockView {
  /** The manifest of the one-layer image. */
  manifest: Digest
}

/**
 * Push the raw file at `rawPath` as the one-layer image `ref` with `config`
 * (the original image's config, so env and cmd travel along). Async. The
 * ref changes last. Throws what pushBlockView and the store throw.
 */
export async function pushBlockViewImage (rawPath: string, ref: ImageRef, config: OciImageConfig, opts: Omit<PushBlockViewOptions, 'lease'>): Promise<PushedBlockViewImage> {
  return await withStoreLease(opts.store, `block view push of ${formatRef(ref)}`, async lease => await pushLeased(rawPath, ref, config, { ...opts, lease }))
}

async function pushLeased (rawPath: string, ref: ImageRef, config: OciImageConfig, opts: PushBlockViewOptions): Promise<PushedBlockViewImage> {
  const pushed = await pushBlockView(rawPath, opts)
  const manifest: ImageManifest = {
    mediaType: MANIFEST_MEDIA_TYPE,
    layers: [{ digest: pushed.digest, diffId: pushed.rawDigest, size: pushed.stats.plainBytes, storedBytes: pushed.stats.storedBytes, entries: pushed.stats.entries }],
    config: { ...config, rootfs: { type: 'layers', diff_ids: [pushed.rawDigest] } },
    blockView: pushed.digest
  }
  const object = encodeManifestObject(manifest)
  await opts.store.put(manifestKey(digestHex(object.digest)), object.bytes)
  opts.lease.assertValid()
  await updateRef(opts.store, ref, object.digest)
  return { ...pushed, manifest: object.digest }
}
