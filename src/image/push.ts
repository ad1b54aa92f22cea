/**
 * `layerctl push`: an input image (any kind openImageSource detects) into
 * the store as chunk blobs, one TOC per layer, a manifest, and last the ref.
 *
 * Order of writes: blobs and their indexes as they fill, then TOCs, then the
 * manifest, then the ref. A failure at any point leaves the ref untouched;
 * the blobs already written are found by the rerun's dedup, so it uploads
 * only what is missing.
 *
 * May import: src/errors.ts, src/format/, src/store/, src/state/, this folder.
 */
import { BadInputError } from '../errors.js'
import { digestHex, type Digest } from '../format/digest.js'
import { manifestKey } from '../format/keys.js'
import { MANIFEST_MEDIA_TYPE, type ImageManifest, type LayerDescriptor, type OciImageConfig } from '../format/manifest.js'
import { mergeLayers } from '../format/merge.js'
import { formatRef, type ImageRef } from '../format/ref.js'
import type { LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import type { NodeDb } from '../state/node-db.js'
import { BlobPacker } from './blob-packer.js'
import { ChunkingPool, DEFAULT_CHUNKING } from './chunking-pool.js'
import type { ChunkingParams } from './file-chunking.js'
import { ChunkIndex } from './chunk-index.js'
import type { LayerWriteStats, PushSession } from './layer-writer.js'
import { encodeManifestObject } from './metadata-objects.js'
import { pushLayer } from './push-layer.js'
import { storeTarSplit } from './tar-splits.js'
import { updateRef } from './refs.js'
import { guardReusedImage } from './reuse-guard.js'
import { withStoreLease, type StoreLease } from '../store/store-leases.js'
import { findKnownLayer, recordLayerByBlob, recordLayerByDiffId, storedLayerStats } from './known-layers.js'
import type { LoadedImage } from './load-image.js'
import type { ImageSource } from './sources/image-source.js'
import { openSource, type OpenSourceOptions } from './sources/open-source.js'
import { parseSourceSpec } from './sources/source-spec.js'

export interface PushProgress {
  layerStart?: (i: number, count: number, name: string, inputBytes: number | undefined) => void
  layerBytes?: (i: number, plainBytes: number) => void
  layerDone?: (i: number, count: number, result: PushedLayer) => void
}

export interface PushOptions extends OpenSourceOptions {
  store: ObjectStore
  db: NodeDb
  /** Chunk sizes and zstd level; default per-file FastCDC 8/32/128 KiB, level 3 (bench/chunking.ts). */
  chunking?: ChunkingParams
  /** Chunking worker threads; 0 works inline. */
  workers?: number
  packBytes?: number
  progress?: PushProgress
  /**
   * Put the pushed layers on top of this image (commit): its layers and
   * config are kept, a history entry is added, and `base` records it.
   */
  onto?: { image: LoadedImage, name: string, createdBy: string }
  /**
   * The caller's store lease (src/store/store-leases.ts); without one, the
   * push takes its own for its whole length.
   */
  lease?: StoreLease
  /** Called (sync) with the opened source before anything is read (pushImage): the CLI tunes its process for the source's kind. */
  opened?: (source: ImageSource) => void
}

export interface PushedLayer extends LayerWriteStats {
  digest: Digest
  diffId: Digest
  /** True when the TOC object was already in the store (the whole layer deduplicated). */
  existed: boolean
  /** True when the layer was recognised by its declared blob digest or diff_id and not read at all. */
  skipped?: boolean
  /** How a skipped layer was recognised: its stored blob's digest, or its diff_id. */
  skippedBy?: 'blob' | 'diff'
}

export interface PushResult {
  ref: ImageRef
  manifest: Digest
  layers: PushedLayer[]
  /** Bytes written to the store by this push: blobs, blob indexes, TOCs, manifest. */
  uploadedBytes: number
}

/**
 * Push the image `src` names (source-spec.ts: `docker://…`, `oci:DIR[:TAG]`,
 * `oci-archive:FILE[:TAG]`, `docker-archive:FILE[:REF]`, or a path) as
 * `ref`. Async; the ref changes only if everything else succeeded.
 */
export async function pushImage (src: string, ref: ImageRef, opts: PushOptions): Promise<PushResult> {
  const source = await openSource(parseSourceSpec(src), opts)
  try {
    opts.opened?.(source)
    return await pushSource(source, ref, opts)
  } finally {
    await source.close()
  }
}

/**
 * Push an already opened source. Async. Holds a store lease (its own unless
 * `opts.lease`): it dedups against no blob a running gc condemned, and
 * throws ConflictError instead of writing the ref once the lease is stale.
 */
export async function pushSource (source: ImageSource, ref: ImageRef, opts: PushOptions): Promise<PushResult> {
  if (opts.lease !== undefined) return await pushLeased(source, ref, opts, opts.lease)
  return await withStoreLease(opts.store, `push of ${formatRef(ref)}`, async lease => await pushLeased(source, ref, opts, lease))
}

async function pushLeased (source: ImageSource, ref: ImageRef, opts: PushOptions, lease: StoreLease): Promise<PushResult> {
  const { store } = opts
  const index = new ChunkIndex(opts.db, store.url)
  await index.sync(store, { excludeBlobs: lease.condemnedBlobs() })
  const params = opts.chunking ?? DEFAULT_CHUNKING
  // Into an empty store (a first push) the index has nothing to find: skip its per-chunk lookups,
  // in the workers (which skip compressing stored chunks) and on the main thread, together ~5% of a
  // push's CPU samples, on its busiest thread too. Dedup within this push is the session's, unaffected.
  const storeWasEmpty = index.isEmpty()
  const dedup = opts.db.memory || storeWasEmpty ? undefined : { dbPath: opts.db.name, storeUrl: store.url, excludeBlobs: index.excludedBlobs() }
  const storedChunks: Pick<ChunkIndex, 'lookup'> = storeWasEmpty ? { lookup: () => undefined } : index
  const chunking = new ChunkingPool({ params: { ...params, ...(dedup === undefined ? {} : { dedup }) }, ...(opts.workers === undefined ? {} : { workers: opts.workers }) })
  const packer = new BlobPacker(store, index, { targetBytes: opts.packBytes })
  const session: PushSession = new Map()
  const tocs: LayerToc[] = []
  const layers: PushedLayer[] = []
  let metadataBytes = 0
  try {
    const count = source.layers.length
    // Layers the store holds already (by blob digest, else diff_id) are never read, or downloaded.
    const known = await Promise.all(source.layers.map(async l => await findKnownLayer(store, { blobDigest: l.declaredBlobDigest, diffId: l.declaredDiffId }, lease)))
    source.prefetchLayers?.(known.flatMap((k, i) => (k === undefined ? [i] : [])))
    for (const [i, layer] of source.layers.entries()) {
      opts.progress?.layerStart?.(i, count, layer.name, layer.inputBytes)
      const stored = known[i]
      if (stored !== undefined) {
        tocs.push(stored.toc)
        if (stored.by === 'diff' && layer.declaredBlobDigest !== undefined) await recordLayerByBlob(store, layer.declaredBlobDigest, stored.digest)
        const pushed: PushedLayer = { ...storedLayerStats(stored.toc), digest: stored.digest, diffId: stored.toc.diffId as Digest, existed: true, skipped: true, skippedBy: stored.by }
        layers.push(pushed)
        opts.progress?.layerDone?.(i, count, pushed)
        continue
      }
      const { toc, stats, digest, existed, tocBytesWritten } = await pushLayer(layer, {
        store, lease, chunking, packer, index: storedChunks, session,
        onProgress: bytes => opts.progress?.layerBytes?.(i, bytes)
      })
      metadataBytes += tocBytesWritten
      // What export needs to write this tar again byte for byte; written before the hints that name the layer.
      const split = layer.tarSplit?.()
      if (split !== undefined) metadataBytes += await storeTarSplit(store, lease, toc, split)
      await recordLayerByDiffId(store, toc.diffId as Digest, digest)
      // Recorded only now: reading the layer verified its blob against this digest.
      if (layer.declaredBlobDigest !== undefined) await recordLayerByBlob(store, layer.declaredBlobDigest, digest)
      tocs.push(toc)
      const pushed: PushedLayer = { ...stats, digest, diffId: toc.diffId as Digest, existed }
      layers.push(pushed)
      opts.progress?.layerDone?.(i, count, pushed)
    }
  } finally {
    await chunking.close()
  }
  const base = opts.onto?.image
  if (base !== undefined) await guardReusedImage(store, lease, base, `push of ${formatRef(ref)} onto ${opts.onto!.name}`)
  const conflicts = mergeLayers([...(base?.tocs ?? []), ...tocs]).conflicts
  if (conflicts.length > 0) {
    const c = conflicts[0]!
    throw new BadInputError(`cannot push ${source.name}: layer ${c.layer + 1} entry ${JSON.stringify(c.path)}: ${c.reason}` +
      (conflicts.length > 1 ? ` (and ${conflicts.length - 1} more)` : ''))
  }
  const pushedLayers = layers.map((l): LayerDescriptor => ({
    digest: l.digest, diffId: l.diffId, size: l.plainBytes, storedBytes: l.storedBytes, entries: l.entries
  }))
  const allLayers = [...(base?.manifest.layers ?? []), ...pushedLayers]
  const config = base === undefined
    ? source.config
    : { ...base.manifest.config, history: [...(base.manifest.config.history ?? []), { created: new Date().toISOString(), created_by: opts.onto!.createdBy }] }
  const manifest: ImageManifest = {
    mediaType: MANIFEST_MEDIA_TYPE,
    layers: allLayers,
    config: withDiffIds(config, allLayers.map(l => l.diffId)),
    ...(base === undefined ? {} : { base: { ref: opts.onto!.name, manifest: base.digest, layers: base.manifest.layers.length } })
  }
  const object = encodeManifestObject(manifest)
  await store.put(manifestKey(digestHex(object.digest)), object.bytes)
  metadataBytes += object.bytes.length
  lease.assertValid()
  await updateRef(store, ref, object.digest, new Date(), source.origin ?? { reference: source.name })
  return { ref, manifest: object.digest, layers, uploadedBytes: packer.stats.uploadedBytes + metadataBytes }
}

/** The config with rootfs.diff_ids set to what was actually pushed. */
export function withDiffIds (config: OciImageConfig, diffIds: string[]): OciImageConfig {
  return { ...config, rootfs: { type: 'layers', diff_ids: diffIds } }
}
