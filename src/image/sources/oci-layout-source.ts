/**
 * OCI image layouts (a directory) and OCI archives (the same layout inside a
 * tar, read in place): index.json → (nested index →) manifest → config and
 * layers.
 *
 * Everything the manifest names is checked before any layer is read: every
 * descriptor is a sha256 digest, every blob exists with the declared size,
 * every layer media type is one layerd reads, and the config's diff_ids match
 * the layer count. Small blobs (index, manifest, config) are verified against
 * their digest when read; layer blobs while they stream, along with their
 * uncompressed digest against the config's diff_ids.
 *
 * May import: src/errors.ts, src/format/, the modules next to it.
 */
import { BadInputError } from '../../errors.js'
import { isDigest, sha256Digest, shortDigest, type Digest } from '../../format/digest.js'
import type { OciImageConfig } from '../../format/manifest.js'
import type { ImageSource, ImageSourceKind } from './image-source.js'
import type { IngestContext } from './ingest-policy.js'
import { TarLayerSource } from './layer-tar.js'
import { MAX_JSON_BYTES, parseImageJson, type LayoutFiles } from './layout-files.js'

interface Descriptor {
  mediaType?: string
  digest: Digest
  size: number
  annotations?: Record<string, string>
  platform?: { os?: string, architecture?: string, variant?: string }
}

const INDEX_TYPES = new Set(['application/vnd.oci.image.index.v1+json', 'application/vnd.docker.distribution.manifest.list.v2+json'])
const MANIFEST_TYPES = new Set(['application/vnd.oci.image.manifest.v1+json', 'application/vnd.docker.distribution.manifest.v2+json'])
/** Layer media types layerd reads (OCI and docker; plain, gzip, zstd). */
export const LAYER_TYPES = new Set([
  'application/vnd.oci.image.layer.v1.tar',
  'application/vnd.oci.image.layer.v1.tar+gzip',
  'application/vnd.oci.image.layer.v1.tar+zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd',
  'application/vnd.docker.image.rootfs.diff.tar',
  'application/vnd.docker.image.rootfs.diff.tar.gzip',
  'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip'
])
const REF_NAME = 'org.opencontainers.image.ref.name'
const CONTAINERD_NAME = 'io.containerd.image.name'
const MAX_INDEX_DEPTH = 4
const DEFAULT_PLATFORM = { os: 'linux', architecture: 'amd64' }

/**
 * Open the OCI layout held by `files`. Async. `tag` picks an image by its
 * `org.opencontainers.image.ref.name` (or `io.containerd.image.name`)
 * annotation when the layout holds several. Throws BadInputError naming the
 * layout for anything malformed, missing or ambiguous.
 */
export async function openOciLayout (files: LayoutFiles, kind: ImageSourceKind, name: string, ctx: IngestContext, tag?: string): Promise<ImageSource> {
  const label = files.label
  const layoutDoc = parseImageJson(await files.read('oci-layout', MAX_JSON_BYTES), label, 'oci-layout') as { imageLayoutVersion?: unknown }
  if (typeof layoutDoc?.imageLayoutVersion !== 'string' || !layoutDoc.imageLayoutVersion.startsWith('1.')) {
    throw new BadInputError(`${label}: oci-layout has imageLayoutVersion ${JSON.stringify(layoutDoc?.imageLayoutVersion)}; layerd reads 1.x`)
  }
  const index = parseImageJson(await files.read('index.json', MAX_JSON_BYTES), label, 'index.json')
  const manifestDesc = await selectManifest(files, descriptorsOf(index, label, 'index.json'), tag, 0)
  const manifest = await readJsonBlob(files, manifestDesc, 'manifest', 'index.json') as { mediaType?: string, config?: unknown, layers?: unknown }
  const where = `manifest ${manifestDesc.digest}`
  if (manifest === null || typeof manifest !== 'object') throw new BadInputError(`${label}: ${where} is not a JSON object`)
  if (manifest.mediaType !== undefined && !MANIFEST_TYPES.has(manifest.mediaType)) {
    throw new BadInputError(`${label}: ${where} has media type ${JSON.stringify(manifest.mediaType)}, not an image manifest`)
  }
  const configDesc = checkDescriptor(manifest.config, label, `${where} config`)
  if (!Array.isArray(manifest.layers)) throw new BadInputError(`${label}: ${where} has no layers array`)
  const layerDescs = manifest.layers.map((d, i) => checkDescriptor(d, label, `${where} layer ${i + 1}`))

  // Everything named must be present before anything is read (and uploaded).
  for (const [i, d] of layerDescs.entries()) {
    if (d.mediaType === undefined || !LAYER_TYPES.has(d.mediaType)) {
      throw new BadInputError(`${label}: ${where} layer ${i + 1} (${d.digest}) has media type ${JSON.stringify(d.mediaType)}, which layerd does not read`)
    }
    await requireBlob(files, d, `${where} names layer ${d.digest}`)
  }
  const config = await readJsonBlob(files, configDesc, 'config', where) as OciImageConfig
  if (config === null || typeof config !== 'object' || Array.isArray(config)) throw new BadInputError(`${label}: config ${configDesc.digest} is not a JSON object`)
  const diffIds = configDiffIds(config, layerDescs.length, label)

  const layers = layerDescs.map((d, i) => new TarLayerSource({
    name: `${label}, layer ${i + 1} of ${layerDescs.length} (${shortDigest(d.digest)})`,
    inputBytes: d.size,
    open: () => files.open(blobPath(d.digest)),
    blobDigest: d.digest,
    blobSize: d.size,
    ...(diffIds !== undefined ? { diffId: diffIds[i]! } : {})
  }, ctx))
  const origin = { reference: `${kind === 'oci-layout' ? 'oci' : 'oci-archive'}:${name}${tag === undefined ? '' : `:${tag}`}`, manifest: manifestDesc.digest }
  return { kind, name, config, layers, origin, close: async () => {} }
}

async function selectManifest (files: LayoutFiles, descs: Descriptor[], tag: string | undefined, depth: number): Promise<Descriptor> {
  const label = files.label
  let candidates = descs
  if (tag !== undefined) {
    candidates = descs.filter(d => d.annotations?.[REF_NAME] === tag || d.annotations?.[CONTAINERD_NAME] === tag)
    if (candidates.length === 0) {
      throw new BadInputError(`${label}: no image named ${JSON.stringify(tag)} in index.json (it has: ${describeRefs(descs)})`)
    }
  }
  candidates = [...new Map(candidates.map(d => [d.digest, d])).values()]
  if (candidates.length > 1) {
    const native = candidates.filter(d => d.platform?.os === DEFAULT_PLATFORM.os && d.platform?.architecture === DEFAULT_PLATFORM.architecture)
    if (native.length === 1) candidates = native
  }
  if (candidates.length === 0) throw new BadInputError(`${label}: index.json lists no manifests`)
  if (candidates.length > 1) {
    throw new BadInputError(`${label}: index.json holds ${candidates.length} images (${describeRefs(candidates)}); choose one by its ref name (tag)`)
  }
  const chosen = candidates[0]!
  if (chosen.mediaType !== undefined && INDEX_TYPES.has(chosen.mediaType)) {
    if (depth >= MAX_INDEX_DEPTH) throw new BadInputError(`${label}: image indexes nested more than ${MAX_INDEX_DEPTH} deep`)
    const nested = await readJsonBlob(files, chosen, 'image index', 'index.json')
    return await selectManifest(files, descriptorsOf(nested, label, `image index ${chosen.digest}`), undefined, depth + 1)
  }
  if (chosen.mediaType !== undefined && !MANIFEST_TYPES.has(chosen.mediaType)) {
    throw new BadInputError(`${label}: index.json names ${chosen.digest} with media type ${JSON.stringify(chosen.mediaType)}, not an image manifest`)
  }
  return chosen
}

function describeRefs (descs: Descriptor[]): string {
  return descs.map(d => {
    const ref = d.annotations?.[REF_NAME] ?? d.annotations?.[CONTAINERD_NAME]
    const platform = d.platform !== undefined ? `${d.platform.os ?? '?'}/${d.platform.architecture ?? '?'}` : undefined
    return [ref ?? shortDigest(d.digest), platform].filter(Boolean).join(' ')
  }).join(', ')
}

function descriptorsOf (doc: unknown, label: string, what: string): Descriptor[] {
  const manifests = (doc as { manifests?: unknown } | null)?.manifests
  if (!Array.isArray(manifests)) throw new BadInputError(`${label}: ${what} has no manifests array`)
  return manifests.map((d, i) => checkDescriptor(d, label, `${what} entry ${i + 1}`))
}

function checkDescriptor (raw: unknown, label: string, what: string): Descriptor {
  const d = raw as Partial<Descriptor> | null
  if (d === null || typeof d !== 'object') throw new BadInputError(`${label}: ${what} is not a descriptor`)
  const digest: unknown = d.digest
  if (typeof digest !== 'string') throw new BadInputError(`${label}: ${what} has no digest`)
  if (!isDigest(digest)) {
    throw new BadInputError(`${label}: ${what} has digest ${JSON.stringify(digest.slice(0, 80))}; layerd reads sha256 digests only`)
  }
  if (!Number.isSafeInteger(d.size) || (d.size as number) < 0) throw new BadInputError(`${label}: ${what} has an invalid size`)
  if (d.mediaType !== undefined && typeof d.mediaType !== 'string') throw new BadInputError(`${label}: ${what} has an invalid mediaType`)
  return d as Descriptor
}

function blobPath (digest: Digest): string {
  return `blobs/sha256/${digest.slice('sha256:'.length)}`
}

async function requireBlob (files: LayoutFiles, d: Descriptor, what: string): Promise<void> {
  const size = await files.size(blobPath(d.digest))
  if (size === undefined) throw new BadInputError(`${files.label}: ${what} which is not in blobs/`)
  if (size !== d.size) throw new BadInputError(`${files.label}: ${what} with size ${d.size}, but the blob is ${size} bytes`)
}

/** Read, verify and parse a small JSON blob; `namedBy` says which document names it, for messages. */
async function readJsonBlob (files: LayoutFiles, d: Descriptor, what: string, namedBy: string): Promise<unknown> {
  if (d.size > MAX_JSON_BYTES) throw new BadInputError(`${files.label}: ${what} ${d.digest} is ${d.size} bytes, more than ${MAX_JSON_BYTES}`)
  await requireBlob(files, d, `${namedBy} names ${what} ${d.digest}`)
  const bytes = await files.read(blobPath(d.digest), MAX_JSON_BYTES)
  const actual = sha256Digest(bytes)
  if (actual !== d.digest) throw new BadInputError(`${files.label}: blob ${d.digest} (${what}) has digest ${actual} (corrupt or tampered layout)`)
  return parseImageJson(bytes, files.label, `${what} ${d.digest}`)
}

/** The config's diff_ids, checked against the layer count; undefined when the config has none. */
export function configDiffIds (config: OciImageConfig, layers: number, label: string): Digest[] | undefined {
  const ids = config.rootfs?.diff_ids
  if (ids === undefined) return undefined
  if (!Array.isArray(ids) || !ids.every(isDigest)) throw new BadInputError(`${label}: config rootfs.diff_ids is not a list of sha256 digests`)
  if (ids.length !== layers) throw new BadInputError(`${label}: config lists ${ids.length} diff_ids for ${layers} layers`)
  return ids
}
