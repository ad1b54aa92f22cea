/**
 * The OCI image containerd gets for a layerd image: the config as layerd
 * keeps it (verbatim, src/format/manifest.ts; `rootfs.diff_ids` checked
 * against the layers, since containerd names each layer's snapshot by the
 * chain ID of those diff_ids), and a manifest whose layer descriptors are
 * synthesized from what layerd records per layer.
 *
 * Why synthesized: an image pushed from a file or directory has no
 * registry blob, and containerd never fetches one here (every layer is a
 * remote snapshot). Each layer is described as what it is, an uncompressed
 * tar (`application/vnd.oci.image.layer.v1.tar`) whose digest is its
 * diff_id, which is exact. Its `size` is the layer's file content bytes,
 * not a tar's size (tar headers and padding are not stored): the
 * annotation `io.layerd.size-is-content: "true"` says so, and
 * `io.layerd.layer` names the TOC. The snapshotter finds such a layer both
 * by that label and by `layer-by-diff/<diff_id>`.
 *
 * Pure.
 */
import { BadInputError } from '../errors.js'
import { sha256Digest, type Digest } from '../format/digest.js'
import type { ImageManifest } from '../format/manifest.js'
import { chainIds } from './chain-id.js'

export const OCI_MANIFEST_MEDIA_TYPE = 'application/vnd.oci.image.manifest.v1+json'
export const OCI_CONFIG_MEDIA_TYPE = 'application/vnd.oci.image.config.v1+json'
export const OCI_LAYER_TAR_MEDIA_TYPE = 'application/vnd.oci.image.layer.v1.tar'

export interface OciBlob { digest: Digest, bytes: Buffer, mediaType: string }

export interface OciLayer {
  /** Descriptor digest (the diff_id here). */
  digest: Digest
  diffId: Digest
  /** layerd's TOC digest, when known (a layerd image); a registry layer is found by its blob digest. */
  toc?: Digest
  chainId: Digest
}

export interface OciImage { manifest: OciBlob, config: OciBlob, layers: OciLayer[] }

/** The OCI manifest and config containerd stores for layerd image `m` (named `name` in messages). Pure; BadInputError when the config's diff_ids disagree with the layers. */
export function ociImageOf (name: string, m: ImageManifest): OciImage {
  const diffIds = m.layers.map(l => l.diffId)
  const config = { ...m.config, rootfs: m.config.rootfs ?? { type: 'layers' as const, diff_ids: diffIds } }
  const declared = config.rootfs.diff_ids
  if (declared.length !== diffIds.length || declared.some((d, i) => d !== diffIds[i])) {
    throw new BadInputError(`image ${name}: its config's rootfs.diff_ids (${declared.length}) do not match its ${diffIds.length} layer(s)' diff_ids`)
  }
  if (m.layers.length === 0) throw new BadInputError(`image ${name} has no layers: containerd cannot run it`)
  const configBytes = Buffer.from(JSON.stringify(config))
  const configBlob: OciBlob = { digest: sha256Digest(configBytes), bytes: configBytes, mediaType: OCI_CONFIG_MEDIA_TYPE }
  const chains = chainIds(diffIds)
  const layers: OciLayer[] = m.layers.map((l, i) => ({ digest: l.diffId, diffId: l.diffId, toc: l.digest, chainId: chains[i]! }))
  const manifest = {
    schemaVersion: 2,
    mediaType: OCI_MANIFEST_MEDIA_TYPE,
    config: { mediaType: OCI_CONFIG_MEDIA_TYPE, digest: configBlob.digest, size: configBytes.length },
    layers: m.layers.map(l => ({
      mediaType: OCI_LAYER_TAR_MEDIA_TYPE,
      digest: l.diffId,
      size: l.size,
      annotations: { 'io.layerd.layer': l.digest, 'io.layerd.size-is-content': 'true' }
    }))
  }
  const manifestBytes = Buffer.from(JSON.stringify(manifest))
  return { manifest: { digest: sha256Digest(manifestBytes), bytes: manifestBytes, mediaType: OCI_MANIFEST_MEDIA_TYPE }, config: configBlob, layers }
}
