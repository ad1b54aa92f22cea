/**
 * One layer into the store, the steps every push of a layer takes: its
 * chunks into blobs (writeLayer), then its TOC object under `layers/`,
 * written unless the store already holds it (or holds it condemned by a
 * running gc, when it is written again). Used by image push and by block
 * views (src/blockview/push-block-view.ts), so both write the same objects.
 *
 * What a caller records about the layer afterwards (push's layer-by-diff and
 * layer-by-blob entries) is the caller's.
 *
 * May import: src/format/, src/store/, this folder.
 */
import { digestHex, type Digest } from '../format/digest.js'
import { layerKey } from '../format/keys.js'
import type { LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import type { StoreLease } from '../store/store-leases.js'
import { writeLayer, type LayerWriteStats, type LayerWriterDeps } from './layer-writer.js'
import { encodeTocObject } from './metadata-objects.js'
import type { LayerSource } from './sources/image-source.js'

export interface PushLayerDeps extends LayerWriterDeps {
  store: ObjectStore
  /** The caller's store lease: a TOC a running gc condemned is written again. */
  lease: StoreLease
}

export interface PushLayerResult {
  toc: LayerToc
  stats: LayerWriteStats
  /** Digest of the TOC object: the layer's digest in a manifest. */
  digest: Digest
  /** True when the TOC object was already in the store. */
  existed: boolean
  /** Bytes of the TOC object written to the store (0 when it was not written). */
  tocBytesWritten: number
}

/**
 * Chunk `layer` into the store and store its TOC. Async. Throws what
 * writeLayer throws (the source's BadInputError, LimitExceededError, store
 * failures); the TOC is written only after every blob it names.
 */
export async function pushLayer (layer: LayerSource, deps: PushLayerDeps): Promise<PushLayerResult> {
  const { store, lease, ...writerDeps } = deps
  // The TOC is encoded (JSON, zstd, sha256) while the layer's last blob is written.
  const { toc, stats, prepared } = await writeLayer(layer, writerDeps, encodeTocObject)
  const object = prepared!
  const key = layerKey(digestHex(object.digest))
  const existed = (await store.stat(key)) !== undefined
  let tocBytesWritten = 0
  if (!existed || lease.isCondemned(key)) {
    await store.put(key, object.bytes)
    tocBytesWritten = object.bytes.length
  }
  return { toc, stats, digest: object.digest, existed, tocBytesWritten }
}
