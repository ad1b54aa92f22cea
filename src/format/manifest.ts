/**
 * Image manifests and refs as stored in the object store.
 *
 * A manifest is the ordered list of layer TOCs plus the image's OCI config
 * (https://github.com/opencontainers/image-spec/blob/main/config.md), kept
 * verbatim so env, entrypoint, cmd, workdir and user survive a round trip.
 * A ref names a manifest and keeps the history of the manifests it named.
 *
 * Pure: no fs, network or native code. Decoders validate untrusted input.
 */
import { CorruptObjectError } from '../errors.js'
import { isDigest, type Digest } from './digest.js'

export const MANIFEST_MEDIA_TYPE = 'application/vnd.layerd.manifest.v1+json'

export interface LayerDescriptor {
  /** Digest of the layer's TOC object: the layer's identity. */
  digest: Digest
  /** OCI diff_id of the layer as pushed. */
  diffId: Digest
  /** Plain bytes of file content in this layer. */
  size: number
  /** Compressed bytes of all chunks this layer references. */
  storedBytes: number
  entries: number
}

/** The subset of the OCI image config that layerd reads; everything else is carried along untouched. */
export interface OciImageConfig {
  architecture?: string
  os?: string
  config?: {
    User?: string
    Env?: string[]
    Entrypoint?: string[] | null
    Cmd?: string[] | null
    WorkingDir?: string
    Labels?: Record<string, string>
    [k: string]: unknown
  }
  rootfs?: { type: 'layers', diff_ids: string[] }
  history?: Array<Record<string, unknown>>
  [k: string]: unknown
}

export interface ImageManifest {
  mediaType: typeof MANIFEST_MEDIA_TYPE
  layers: LayerDescriptor[]
  config: OciImageConfig
  /** The image this one was built on, when known: its lowest `layers` layers are that image's. Used by rebase. */
  base?: { ref: string, manifest: Digest, layers: number }
  /** Digest of the layer TOC holding the image's block view (raw ext4), once built. */
  blockView?: Digest
}

export interface RefVersion {
  manifest: Digest
  at: string
  /** Where this version was pushed from (`docker://host/repo:tag`, `oci:DIR:TAG`, a path) and that source's manifest digest. */
  source?: { reference: string, manifest?: Digest, index?: Digest }
}

export interface RefRecord {
  name: string
  tag: string
  /** Newest first; `history[0]` is the current version. */
  history: RefVersion[]
}

export function encodeJson (value: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(value))
}

function parseJson (bytes: Uint8Array, what: string): any {
  try { return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) } catch (err) {
    throw new CorruptObjectError(`${what} is not valid JSON`, { cause: err })
  }
}

export function decodeManifest (bytes: Uint8Array, source: string): ImageManifest {
  const m = parseJson(bytes, `manifest ${source}`)
  const fail = (why: string): never => { throw new CorruptObjectError(`manifest ${source} is invalid: ${why}`) }
  if (m === null || typeof m !== 'object') fail('not an object')
  if (m.mediaType !== MANIFEST_MEDIA_TYPE) fail(`unknown mediaType ${JSON.stringify(m.mediaType)}`)
  if (!Array.isArray(m.layers)) fail('layers is not an array')
  for (const [i, l] of m.layers.entries()) {
    if (l === null || typeof l !== 'object' || !isDigest(l.digest) || !isDigest(l.diffId) ||
      ![l.size, l.storedBytes, l.entries].every(n => Number.isSafeInteger(n) && n >= 0)) fail(`layer ${i} is malformed`)
  }
  if (m.config === null || typeof m.config !== 'object' || Array.isArray(m.config)) fail('config is not an object')
  if (m.base !== undefined && (typeof m.base.ref !== 'string' || !isDigest(m.base.manifest) || !Number.isSafeInteger(m.base.layers))) fail('base is malformed')
  if (m.blockView !== undefined && !isDigest(m.blockView)) fail('blockView is not a digest')
  return m as ImageManifest
}

export function decodeRefRecord (bytes: Uint8Array, source: string): RefRecord {
  const r = parseJson(bytes, `ref ${source}`)
  if (r === null || typeof r !== 'object' || typeof r.name !== 'string' || typeof r.tag !== 'string' ||
    !Array.isArray(r.history) || r.history.length === 0 ||
    !r.history.every((v: any) => v !== null && isDigest(v.manifest) && typeof v.at === 'string')) {
    throw new CorruptObjectError(`ref ${source} is invalid`)
  }
  return r as RefRecord
}
