/**
 * Registry manifests: what a tag or digest names, read as an image.
 *
 * - docker v2 schema 2 and OCI image manifests are read;
 * - docker manifest lists and OCI indexes choose one manifest by platform
 *   (`os/arch[/variant]`, default this host), skipping attestation entries
 *   (buildkit's `vnd.docker.reference.type: attestation-manifest`, and
 *   `unknown/unknown` platforms);
 * - docker schema 1 (signed or not) is refused with a clear error.
 *
 * Pure: no fs, network or native code. May import: src/errors.ts, src/format/.
 */
import { BadInputError, UnsupportedError } from '../errors.js'
import { isDigest, shortDigest, type Digest } from '../format/digest.js'

export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json'
export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json'
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json'
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json'
const SCHEMA1_TYPES = new Set(['application/vnd.docker.distribution.manifest.v1+json', 'application/vnd.docker.distribution.manifest.v1+prettyjws'])
const INDEX_TYPES = new Set([OCI_INDEX, DOCKER_LIST])
const MANIFEST_TYPES = new Set([OCI_MANIFEST, DOCKER_MANIFEST])

export interface Platform { os: string, architecture: string, variant?: string }

export interface ManifestDescriptor {
  mediaType: string
  digest: Digest
  size: number
  platform?: Platform
  annotations?: Record<string, string>
}

export type ParsedManifest =
  | { kind: 'index', manifests: ManifestDescriptor[] }
  | { kind: 'image', config: ManifestDescriptor, layers: ManifestDescriptor[] }

/** This host's platform in OCI terms (Node's `x64` is `amd64`, `arm` is `arm/v7`, …). */
export function hostPlatform (arch: string = process.arch): Platform {
  const map: Record<string, Platform> = {
    x64: { os: 'linux', architecture: 'amd64' },
    arm64: { os: 'linux', architecture: 'arm64', variant: 'v8' },
    arm: { os: 'linux', architecture: 'arm', variant: 'v7' },
    ia32: { os: 'linux', architecture: '386' },
    ppc64: { os: 'linux', architecture: 'ppc64le' },
    s390x: { os: 'linux', architecture: 's390x' },
    riscv64: { os: 'linux', architecture: 'riscv64' }
  }
  return map[arch] ?? { os: 'linux', architecture: arch }
}

/** Parse `os/arch[/variant]`. Sync; BadInputError naming the input. */
export function parsePlatform (text: string): Platform {
  const parts = text.split('/')
  if (parts.length < 2 || parts.length > 3 || parts.some(p => !/^[a-z0-9_.-]+$/.test(p))) {
    throw new BadInputError(`invalid --platform ${JSON.stringify(text)}: want os/arch[/variant], e.g. linux/amd64 or linux/arm64/v8`)
  }
  return { os: parts[0]!, architecture: parts[1]!, ...(parts[2] === undefined ? {} : { variant: parts[2] }) }
}

export function formatPlatform (p: Platform): string {
  return `${p.os}/${p.architecture}${p.variant === undefined ? '' : `/${p.variant}`}`
}

/**
 * Parse a manifest or index served as `mediaType`. Sync. Throws
 * UnsupportedError for schema 1, BadInputError (naming `what`) for anything
 * malformed or of another type.
 */
export function parseManifest (bytes: Uint8Array, mediaType: string, what: string): ParsedManifest {
  let doc: any
  try { doc = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) } catch (err) {
    throw new BadInputError(`${what} is not valid JSON: ${(err as Error).message}`, { cause: err })
  }
  if (doc === null || typeof doc !== 'object') throw new BadInputError(`${what} is not a JSON object`)
  if (SCHEMA1_TYPES.has(mediaType) || doc.schemaVersion === 1) {
    throw new UnsupportedError(`${what} is a docker schema 1 manifest, which layerd does not read (deprecated since 2017); convert it with skopeo copy --format v2s2`)
  }
  const type: string = typeof doc.mediaType === 'string' ? doc.mediaType : mediaType
  if (INDEX_TYPES.has(type) || (type === '' && Array.isArray(doc.manifests))) {
    if (!Array.isArray(doc.manifests)) throw new BadInputError(`${what} is an index without a manifests array`)
    return { kind: 'index', manifests: doc.manifests.map((d: unknown, i: number) => checkDescriptor(d, `${what} entry ${i + 1}`)) }
  }
  if (MANIFEST_TYPES.has(type) || (type === '' && Array.isArray(doc.layers))) {
    if (!Array.isArray(doc.layers)) throw new BadInputError(`${what} has no layers array`)
    return {
      kind: 'image',
      config: checkDescriptor(doc.config, `${what} config`),
      layers: doc.layers.map((d: unknown, i: number) => checkDescriptor(d, `${what} layer ${i + 1}`))
    }
  }
  throw new BadInputError(`${what} has media type ${JSON.stringify(type)}, not an image manifest or index`)
}

function checkDescriptor (raw: unknown, what: string): ManifestDescriptor {
  const d = raw as Partial<ManifestDescriptor> | null
  if (d === null || typeof d !== 'object') throw new BadInputError(`${what} is not a descriptor`)
  if (!isDigest(d.digest)) throw new BadInputError(`${what} has digest ${JSON.stringify(String(d.digest).slice(0, 80))}; layerd reads sha256 digests only`)
  if (!Number.isSafeInteger(d.size) || d.size! < 0) throw new BadInputError(`${what} has an invalid size`)
  if (typeof d.mediaType !== 'string') throw new BadInputError(`${what} has no mediaType`)
  return d as ManifestDescriptor
}

/** Is this index entry an attestation (provenance, SBOM) rather than an image? */
export function isAttestation (d: ManifestDescriptor): boolean {
  return d.annotations?.['vnd.docker.reference.type'] === 'attestation-manifest' ||
    (d.platform?.os === 'unknown' && d.platform.architecture === 'unknown')
}

/**
 * The index entry for `want`. Sync. A variant given must match; none given
 * prefers the entry without one, then the first. Throws BadInputError
 * naming the index and the platforms it has when none matches.
 */
export function selectPlatform (entries: readonly ManifestDescriptor[], want: Platform, what: string): ManifestDescriptor {
  const images = entries.filter(d => !isAttestation(d))
  const same = images.filter(d => d.platform?.os === want.os && d.platform.architecture === want.architecture)
  let match: ManifestDescriptor | undefined
  if (want.variant !== undefined) {
    // arm64's variant is v8 when unnamed (as containerd matches it).
    match = same.find(d => d.platform?.variant === want.variant) ??
      (want.architecture === 'arm64' && want.variant === 'v8' ? same.find(d => d.platform?.variant === undefined) : undefined)
  } else {
    match = same.find(d => d.platform?.variant === undefined) ?? same[0]
  }
  if (match === undefined) {
    const have = images.map(d => d.platform === undefined ? shortDigest(d.digest) : formatPlatform(d.platform))
    throw new BadInputError(`${what} has no image for ${formatPlatform(want)} (it has: ${have.join(', ') || 'none'}); choose one with --platform`)
  }
  if (!MANIFEST_TYPES.has(match.mediaType) && !INDEX_TYPES.has(match.mediaType) && !SCHEMA1_TYPES.has(match.mediaType)) {
    throw new BadInputError(`${what} names ${match.digest} for ${formatPlatform(want)} with media type ${JSON.stringify(match.mediaType)}, not an image manifest`)
  }
  return match
}
