/**
 * docker-archive tars (`docker save`, `skopeo copy … docker-archive:`), read
 * in place: manifest.json `[{Config, RepoTags, Layers}]` → config and layer
 * tars. Layer paths may be symlink members (the legacy `<id>/layer.tar`
 * layout), resolved inside the archive; layer tars may be plain or
 * compressed.
 *
 * All layers are checked to exist before any is read. The config's diff_ids
 * are required (docker requires them too) and each layer's uncompressed
 * digest is verified against them; a config or layer stored under a digest
 * name (`<hex>.json`, `blobs/sha256/<hex>`) is verified against that digest.
 *
 * May import: src/errors.ts, src/format/, the modules next to it.
 */
import { BadInputError } from '../../errors.js'
import { sha256Digest, type Digest } from '../../format/digest.js'
import { normalizeEntryPath } from '../../format/paths.js'
import type { OciImageConfig } from '../../format/manifest.js'
import type { ImageSource } from './image-source.js'
import type { IngestContext } from './ingest-policy.js'
import { TarLayerSource } from './layer-tar.js'
import { MAX_JSON_BYTES, archiveFiles, parseImageJson } from './layout-files.js'
import { configDiffIds } from './oci-layout-source.js'
import type { TarIndex } from './tar-index.js'

interface DockerManifestEntry {
  Config: string
  RepoTags?: string[] | null
  Layers: string[]
}

const DIGEST_NAMED = /^(?:blobs\/sha256\/([0-9a-f]{64})|([0-9a-f]{64})\.json)$/

/** Does this archive look like a docker-archive (a top-level manifest.json that is a list of images)? Async; never throws for non-JSON. */
export async function isDockerArchive (index: TarIndex): Promise<boolean> {
  const m = index.resolveFile('manifest.json')
  if (m === undefined) return false
  try {
    const doc = JSON.parse((await index.read(m, MAX_JSON_BYTES)).toString('utf8'))
    return Array.isArray(doc) && doc.every(e => e !== null && typeof e === 'object' && 'Layers' in e)
  } catch {
    return false
  }
}

/**
 * Open the docker-archive indexed by `index`. Async. `tag` picks an image by
 * its RepoTags (exact, or the part after the last ':') when the archive holds
 * several. Throws BadInputError naming the archive.
 */
export async function openDockerArchive (index: TarIndex, name: string, ctx: IngestContext, tag?: string): Promise<ImageSource> {
  const label = `docker-archive ${name}`
  const files = archiveFiles(index, label)
  const doc = parseImageJson(await files.read('manifest.json', MAX_JSON_BYTES), label, 'manifest.json')
  if (!Array.isArray(doc) || doc.length === 0) throw new BadInputError(`${label}: manifest.json lists no images`)
  const entries = doc.map((e, i) => checkEntry(e, label, i))
  const entry = selectEntry(entries, tag, label)

  const configPath = memberPath(entry.Config, label, 'Config')
  const configBytes = await files.read(configPath, MAX_JSON_BYTES)
  const named = DIGEST_NAMED.exec(configPath)
  if (named !== null && sha256Digest(configBytes) !== `sha256:${named[1] ?? named[2]}`) {
    throw new BadInputError(`${label}: config ${configPath} does not match the digest in its name (corrupt or tampered archive)`)
  }
  const config = parseImageJson(configBytes, label, `config ${configPath}`) as OciImageConfig
  if (config === null || typeof config !== 'object' || Array.isArray(config)) throw new BadInputError(`${label}: config ${configPath} is not a JSON object`)

  const layerPaths = entry.Layers.map(p => memberPath(p, label, 'Layers'))
  const members = layerPaths.map(p => {
    const m = index.resolveFile(p)
    if (m === undefined) throw new BadInputError(`${label}: manifest.json names layer ${JSON.stringify(p)} which is not in the archive`)
    return m
  })
  const diffIds = configDiffIds(config, layerPaths.length, label)
  if (diffIds === undefined) throw new BadInputError(`${label}: config ${configPath} has no rootfs.diff_ids`)

  const layers = members.map((m, i) => {
    const blob = /^blobs\/sha256\/([0-9a-f]{64})$/.exec(m.name)
    return new TarLayerSource({
      name: `${label}, layer ${i + 1} of ${members.length} (${layerPaths[i]})`,
      inputBytes: m.size,
      open: () => index.open(m),
      blobSize: m.size,
      diffId: diffIds[i]!,
      ...(blob !== null ? { blobDigest: `sha256:${blob[1]}` as Digest } : {})
    }, ctx)
  })
  return { kind: 'docker-archive', name, config, layers, close: async () => {} }
}

function checkEntry (raw: unknown, label: string, i: number): DockerManifestEntry {
  const e = raw as Partial<DockerManifestEntry> | null
  const ok = e !== null && typeof e === 'object' && typeof e.Config === 'string' &&
    Array.isArray(e.Layers) && e.Layers.every(l => typeof l === 'string') &&
    (e.RepoTags === undefined || e.RepoTags === null || (Array.isArray(e.RepoTags) && e.RepoTags.every(t => typeof t === 'string')))
  if (!ok) throw new BadInputError(`${label}: manifest.json entry ${i + 1} is malformed (wants Config, Layers, RepoTags)`)
  return e as DockerManifestEntry
}

function selectEntry (entries: DockerManifestEntry[], tag: string | undefined, label: string): DockerManifestEntry {
  const tagsOf = (e: DockerManifestEntry): string[] => e.RepoTags ?? []
  if (tag === undefined) {
    if (entries.length === 1) return entries[0]!
    throw new BadInputError(`${label}: holds ${entries.length} images (${entries.map(e => tagsOf(e).join('|') || e.Config).join(', ')}); choose one by tag`)
  }
  const exact = entries.filter(e => tagsOf(e).includes(tag))
  const matches = exact.length > 0 ? exact : entries.filter(e => tagsOf(e).some(t => t.slice(t.lastIndexOf(':') + 1) === tag))
  if (matches.length === 1) return matches[0]!
  if (matches.length === 0) throw new BadInputError(`${label}: no image tagged ${JSON.stringify(tag)} (it has: ${entries.flatMap(tagsOf).join(', ') || 'none'})`)
  throw new BadInputError(`${label}: several images match tag ${JSON.stringify(tag)}; give the full repository:tag`)
}

function memberPath (p: string, label: string, field: string): string {
  const v = normalizeEntryPath(p)
  if (!v.ok || v.path === '') throw new BadInputError(`${label}: manifest.json ${field} entry ${JSON.stringify(p)} is not a valid member name`)
  return v.path
}
