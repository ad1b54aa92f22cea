/**
 * The OCI image containerd gets for a registry image, for
 * `layerctl containerd pull docker://…`: the registry's own manifest and
 * config, byte for byte (their digests are the registry's), read with
 * src/registry/ (auth, TLS, digest checks); an index is resolved to this
 * host's platform. Layer blobs are never read: each layer is named by its
 * blob digest, which the snapshotter finds through `layer-by-blob`.
 *
 * May import: src/errors.ts, src/format/, src/registry/, this folder.
 */
import { BadInputError } from '../errors.js'
import type { Digest } from '../format/digest.js'
import { hostPlatform, parseManifest, selectPlatform } from '../registry/manifests.js'
import { parseRegistryReference, formatRegistryReference } from '../registry/reference.js'
import { RegistryClient, type RegistryClientOptions } from '../registry/registry-client.js'
import { chainIds } from './chain-id.js'
import { OCI_CONFIG_MEDIA_TYPE, type OciImage } from './oci-image.js'

const MAX_CONFIG_BYTES = 16 * 1024 * 1024

/** `docker://HOST/REPO:TAG` (or without the scheme) → the image's manifest, config and layers. Async; registry and BadInputErrors name the image. */
export async function registryOciImage (source: string, opts: RegistryClientOptions): Promise<OciImage & { ref: string }> {
  const ref = parseRegistryReference(source.replace(/^docker:\/\//, ''))
  const what = formatRegistryReference(ref)
  const client = await RegistryClient.open(ref, opts)
  let fetched = await client.manifest(ref.digest ?? ref.tag ?? 'latest')
  let parsed = parseManifest(fetched.bytes, fetched.mediaType, what)
  if (parsed.kind === 'index') {
    const entry = selectPlatform(parsed.manifests, hostPlatform(), what)
    fetched = await client.manifest(entry.digest)
    parsed = parseManifest(fetched.bytes, fetched.mediaType, what)
    if (parsed.kind !== 'image') throw new BadInputError(`${what}: the index entry for this platform is another index`)
  }
  const configBytes = await client.blob(parsed.config.digest, parsed.config.size, MAX_CONFIG_BYTES, `${what} config`)
  let diffIds: Digest[]
  try {
    diffIds = (JSON.parse(configBytes.toString('utf8')) as { rootfs: { diff_ids: Digest[] } }).rootfs.diff_ids
  } catch (err) {
    throw new BadInputError(`${what}: its config has no rootfs.diff_ids`, { cause: err })
  }
  if (!Array.isArray(diffIds) || diffIds.length !== parsed.layers.length) throw new BadInputError(`${what}: its config lists ${diffIds?.length} diff_ids for ${parsed.layers.length} layers`)
  const chains = chainIds(diffIds)
  return {
    ref: what,
    manifest: { digest: fetched.digest, bytes: fetched.bytes, mediaType: fetched.mediaType },
    config: { digest: parsed.config.digest, bytes: configBytes, mediaType: parsed.config.mediaType || OCI_CONFIG_MEDIA_TYPE },
    layers: parsed.layers.map((l, i) => ({ digest: l.digest, diffId: diffIds[i]!, chainId: chains[i]! }))
  }
}
