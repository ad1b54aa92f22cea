/**
 * A registry image (`docker://…`) as an ImageSource: manifest (through an
 * index by platform), config, then the layers streamed straight from the
 * registry into push's reader, never written whole to disk.
 *
 * Everything is verified: the manifest against its digest, the config
 * against its descriptor, each layer blob against its digest and size as it
 * streams, and each uncompressed layer against the config's diff_id
 * (TarLayerSource does the last two).
 *
 * Several layers download at once: the layers push will read (its
 * `prefetchLayers` hint; stored layers are never requested) start in order,
 * LAYER_DOWNLOAD_WINDOW at a time, each holding at most
 * LAYER_READ_AHEAD_BYTES of compressed bytes its reader has not taken yet.
 * So the bytes in flight are bounded by 3 × 16 MiB = 48 MiB, plus one
 * layer's decompression and tar buffers.
 *
 * May import: src/errors.ts, src/format/, src/registry/, the modules next to it.
 */
import { Readable } from 'node:stream'
import { BadInputError } from '../../errors.js'
import { shortDigest } from '../../format/digest.js'
import type { OciImageConfig } from '../../format/manifest.js'
import { hostPlatform, parseManifest, selectPlatform, formatPlatform, type ManifestDescriptor, type Platform } from '../../registry/manifests.js'
import { formatRegistryReference, type RegistryReference } from '../../registry/reference.js'
import { RegistryClient, type RegistryClientOptions } from '../../registry/registry-client.js'
import type { ImageOrigin, ImageSource } from './image-source.js'
import type { IngestContext } from './ingest-policy.js'
import { TarLayerSource } from './layer-tar.js'
import { MAX_JSON_BYTES, parseImageJson } from './layout-files.js'
import { LAYER_TYPES, configDiffIds } from './oci-layout-source.js'
import { ReadAhead, ReadAheadWindow } from './read-ahead.js'

export interface RegistrySourceOptions extends RegistryClientOptions {
  /** Which image of an index; default this host's. */
  platform?: Platform
}

/** Layers downloading at once (docker's default max-concurrent-downloads). */
export const LAYER_DOWNLOAD_WINDOW = 3
/** Compressed bytes a downloading layer may hold ahead of its reader. */
export const LAYER_READ_AHEAD_BYTES = 16 * 1024 * 1024
const MAX_INDEX_DEPTH = 2

/**
 * Open `ref` on its registry. Async: reads the manifest (and index) and the
 * config; layers are fetched when read. Throws NotFoundError,
 * RegistryError, RegistryAuthError, UnsupportedError (schema 1),
 * BadInputError (malformed, lying or no image for the platform), each
 * naming the reference.
 */
export async function openRegistryImage (ref: RegistryReference, ctx: IngestContext, opts: RegistrySourceOptions): Promise<ImageSource> {
  const client = await RegistryClient.open(ref, opts)
  try {
    return await readImage(client, ref, ctx, opts.platform ?? hostPlatform())
  } catch (err) {
    await client.close()
    throw err
  }
}

async function readImage (client: RegistryClient, ref: RegistryReference, ctx: IngestContext, platform: Platform): Promise<ImageSource> {
  const name = formatRegistryReference(ref)
  let fetched = await client.manifest(ref.digest ?? ref.tag!)
  let what = `${name}: manifest ${fetched.digest}`
  let parsed = parseManifest(fetched.bytes, fetched.mediaType, what)
  let index: string | undefined
  for (let depth = 0; parsed.kind === 'index'; depth++) {
    if (depth >= MAX_INDEX_DEPTH) throw new BadInputError(`${name}: image indexes nested more than ${MAX_INDEX_DEPTH} deep`)
    index ??= fetched.digest
    const entry = selectPlatform(parsed.manifests, platform, `${name}: index ${fetched.digest}`)
    fetched = await client.manifest(entry.digest)
    if (fetched.bytes.length !== entry.size) throw new BadInputError(`${name}: manifest ${entry.digest} is ${fetched.bytes.length} bytes, but the index says ${entry.size}`)
    what = `${name}: manifest ${fetched.digest} (${formatPlatform(platform)})`
    parsed = parseManifest(fetched.bytes, fetched.mediaType, what)
  }
  const manifest = parsed
  for (const [i, d] of manifest.layers.entries()) {
    if (!LAYER_TYPES.has(d.mediaType)) throw new BadInputError(`${what}: layer ${i + 1} (${d.digest}) has media type ${JSON.stringify(d.mediaType)}, which layerd does not read`)
  }
  const configBytes = await client.blob(manifest.config.digest, manifest.config.size, MAX_JSON_BYTES, `${name}: config`)
  const config = parseImageJson(configBytes, name, `config ${manifest.config.digest}`) as OciImageConfig
  if (config === null || typeof config !== 'object' || Array.isArray(config)) throw new BadInputError(`${name}: config ${manifest.config.digest} is not a JSON object`)
  const diffIds = configDiffIds(config, manifest.layers.length, name)

  const downloads = manifest.layers.map((d: ManifestDescriptor, i) =>
    new ReadAhead(() => client.blobStream(d.digest, d.size, `${name}: layer ${i + 1} of ${manifest.layers.length}`), LAYER_READ_AHEAD_BYTES))
  const window = new ReadAheadWindow(downloads, LAYER_DOWNLOAD_WINDOW)
  const layers = manifest.layers.map((d, i) => new TarLayerSource({
    name: `${name}, layer ${i + 1} of ${manifest.layers.length} (${shortDigest(d.digest)})`,
    inputBytes: d.size,
    open: () => Readable.from(window.take(i), { objectMode: false }),
    blobDigest: d.digest,
    blobSize: d.size,
    ...(diffIds !== undefined ? { diffId: diffIds[i]! } : {})
  }, ctx))
  const origin: ImageOrigin = { reference: name, manifest: fetched.digest, ...(index === undefined ? {} : { index: index as ImageOrigin['manifest'] }) }
  let closed = false
  return {
    kind: 'registry',
    name,
    config,
    layers,
    origin,
    prefetchLayers: indexes => window.plan(indexes),
    close: async () => {
      if (closed) return
      closed = true
      window.cancelAll()
      await Promise.all(downloads.filter(d => d.started).map(async d => await d.finished))
      await client.close()
    }
  }
}
