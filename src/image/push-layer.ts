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

/** What {@link startPushLayer} gives at once; `written` resolves once the blobs and then the TOC are in the store. */
export interface StartedLayer extends Omit<PushLayerResult, 'tocBytesWritten'> {
  /** Bytes of the TOC object written (0 when it was already stored). Rejects with an upload or store failure. */
  written: Promise<number>
}

/**
 * Chunk `layer` into the store and store its TOC. Async. Throws what
 * writeLayer throws (the source's BadInputError, LimitExceededError, store
 * failures); the TOC is written only after every blob it names.
 */
export async function pushLayer (layer: LayerSource, deps: PushLayerDeps): Promise<PushLayerResult> {
  const { written, ...started } = await startPushLayer(layer, deps)
  return { ...started, tocBytesWritten: await written }
}

/**
 * pushLayer, but resolving as soon as the layer is read and its TOC built:
 * its last blobs' uploads and then its TOC finish in the background
 * (`written`), so a push can read its next layer meanwhile. The caller must
 * await `written` before anything names the TOC. Async; throws what
 * writeLayer throws.
 */
export async function startPushLayer (layer: LayerSource, deps: PushLayerDeps): Promise<StartedLayer> {
  const { store, lease, ...writerDeps } = deps
  const { toc, stats, uploaded } = await writeLayer(layer, writerDeps)
  const object = encodeTocObject(toc)
  const key = layerKey(digestHex(object.digest))
  const existed = (await store.stat(key)) !== undefined
  const written = (async (): Promise<number> => {
    await uploaded
    if (existed && !lease.isCondemned(key)) return 0
    await store.put(key, object.bytes)
    return object.bytes.length
  })()
  written.catch(() => {}) // the caller awaits it
  return { toc, stats, digest: object.digest, existed, written }
}
