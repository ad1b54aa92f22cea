/**
 * The store's reference graph, for garbage collection and `layerctl df`:
 * from the roots (refs and their history, block-view pointers of kept
 * manifests, recent objects) to manifests, layer TOCs and blobs, and the
 * hints, blob indexes and tar splits that live and die with what they
 * point at (a tar split with a TOC of its diff_id).
 *
 * Content-addressed objects never change, so their decoded references are
 * cached: gc marks twice (before and after waiting for leases), and the
 * second mark reads only refs, pointers and objects that are new.
 *
 * May import: src/errors.ts, src/format/, src/store/, src/image/.
 */
import { NotFoundError } from '../errors.js'
import { digestHex, isDigest, isHex256, type Digest } from '../format/digest.js'
import {
  BLOB_INDEX_PREFIX, BLOBS_PREFIX, BLOCK_VIEWS_PREFIX, GC_PREFIX, LAYER_HINT_PREFIX, LAYERS_PREFIX, MANIFESTS_PREFIX, REFS_PREFIX, TAR_SPLITS_PREFIX, TRACES_PREFIX, traceKey,
  blobKey, layerKey, manifestKey, tarSplitKey
} from '../format/keys.js'
import { decodeRefRecord } from '../format/manifest.js'
import { getManifest, getToc } from '../image/metadata-objects.js'
import type { ListedObject, ObjectStore } from '../store/object-store.js'

/** What an object is, by its key. */
export type ObjectKind = 'blob' | 'blob-index' | 'toc' | 'manifest' | 'ref' | 'block-view' | 'trace' | 'hint' | 'tar-split' | 'other'

export const OBJECT_KINDS: readonly ObjectKind[] = ['blob', 'blob-index', 'toc', 'manifest', 'ref', 'block-view', 'trace', 'hint', 'tar-split', 'other']

export function kindOf (key: string): ObjectKind {
  if (key.startsWith(BLOBS_PREFIX)) return 'blob'
  if (key.startsWith(BLOB_INDEX_PREFIX)) return 'blob-index'
  if (key.startsWith(LAYERS_PREFIX)) return 'toc'
  if (key.startsWith(MANIFESTS_PREFIX)) return 'manifest'
  if (key.startsWith(REFS_PREFIX)) return 'ref'
  if (key.startsWith(BLOCK_VIEWS_PREFIX)) return 'block-view'
  if (key.startsWith(TRACES_PREFIX)) return 'trace'
  if (key.startsWith(LAYER_HINT_PREFIX)) return 'hint'
  if (key.startsWith(TAR_SPLITS_PREFIX)) return 'tar-split'
  return 'other'
}

/** Every object of the store but gc's own coordination objects, by key. Async: one (paged) listing. */
export async function inventory (store: Pick<ObjectStore, 'listObjects'>): Promise<Map<string, ListedObject>> {
  const objects = new Map<string, ListedObject>()
  for await (const o of store.listObjects('')) if (!o.key.startsWith(GC_PREFIX)) objects.set(o.key, o)
  return objects
}

interface TocRefs {
  diffId: string
  blobs: string[]
  /** Per blob: compressed bytes of the distinct chunks this TOC uses in it, by chunk offset. */
  chunks: Map<string, Map<number, number>>
  /** Plain bytes of the distinct chunks, by chunk digest. */
  plain: Map<string, number>
  fileBytes: number
}

interface ManifestRefs { layers: Digest[], blockView?: Digest, layerBytes: number }

export interface MarkOptions {
  /** Versions kept per ref, newest first; undefined keeps the whole history. */
  keepHistory?: number
  /** Objects modified at or after this (store clock) are roots. */
  rootsSince?: Date
}

/** The outcome of one mark: live keys and the figures df reports. */
export interface Marked {
  live: Set<string>
  /** Manifests named by a root that are not in the store (a damaged store), for the report. */
  missing: string[]
  /** Per live blob: compressed bytes of its live chunks. */
  liveChunkBytes: Map<string, number>
  /** Plain bytes of file content summed over live images (each image counted whole), and over distinct live chunks. */
  referencedPlainBytes: number
  distinctPlainBytes: number
}

export class StoreGraph {
  readonly #store: Pick<ObjectStore, 'get' | 'url'>
  readonly #manifests = new Map<string, ManifestRefs>()
  readonly #tocs = new Map<string, TocRefs>()

  constructor (store: Pick<ObjectStore, 'get' | 'url'>) {
    this.#store = store
  }

  /**
   * Mark everything reachable from the roots in `objects`. Async. A root
   * naming a missing manifest or TOC is recorded in `missing`; a corrupt
   * object throws CorruptObjectError (gc then deletes nothing: what that
   * object names cannot be known).
   */
  async mark (objects: ReadonlyMap<string, ListedObject>, opts: MarkOptions = {}): Promise<Marked> {
    const live = new Set<string>()
    const missing: string[] = []
    const liveManifests: Digest[] = []
    const liveTocs = new Set<Digest>()
    const since = opts.rootsSince?.getTime()
    const markToc = async (digest: Digest): Promise<void> => {
      const key = layerKey(digestHex(digest))
      if (live.has(key)) return
      const refs = await this.#toc(digest)
      if (refs === undefined) { missing.push(key); return }
      live.add(key)
      liveTocs.add(digest)
      for (const b of refs.blobs) { live.add(blobKey(b)); live.add(BLOB_INDEX_PREFIX + b) }
      // The layer's tar split lives while a TOC of that tar does.
      if (isDigest(refs.diffId)) { const split = tarSplitKey(digestHex(refs.diffId)); if (objects.has(split)) live.add(split) }
    }
    const markManifest = async (digest: Digest): Promise<void> => {
      const key = manifestKey(digestHex(digest))
      if (live.has(key)) return
      const refs = await this.#manifest(digest)
      if (refs === undefined) { missing.push(key); return }
      live.add(key)
      liveManifests.push(digest)
      for (const l of refs.layers) await markToc(l)
      if (refs.blockView !== undefined) await markToc(refs.blockView)
      // The block view built for this image, if any: its pointer and its one-layer manifest.
      const pointer = BLOCK_VIEWS_PREFIX + digestHex(digest)
      if (objects.has(pointer)) {
        const view = await this.#pointer(pointer)
        if (view !== undefined) { live.add(pointer); await markManifest(view) }
      }
      // Its published access trace lives exactly as long as it does.
      const trace = traceKey(digestHex(digest))
      if (objects.has(trace)) live.add(trace)
    }

    for (const key of objects.keys()) {
      if (!key.startsWith(REFS_PREFIX)) continue
      live.add(key)
      let history: Digest[]
      try {
        history = decodeRefRecord(await this.#store.get(key), `${key} in ${this.#store.url}`).history.map(v => v.manifest)
      } catch (err) {
        if (err instanceof NotFoundError) continue // removed since it was listed
        throw err
      }
      for (const m of history.slice(0, opts.keepHistory ?? history.length)) await markManifest(m)
    }
    if (since !== undefined) {
      for (const [key, o] of objects) {
        if (o.modified.getTime() < since) continue
        live.add(key)
        const hex = key.slice(key.indexOf('/') + 1)
        if (key.startsWith(MANIFESTS_PREFIX) && isHex256(hex)) await markManifest(`sha256:${hex}`)
        else if (key.startsWith(LAYERS_PREFIX) && isHex256(hex)) await markToc(`sha256:${hex}`)
        else if (key.startsWith(BLOB_INDEX_PREFIX)) live.add(BLOBS_PREFIX + hex)
        else if (key.startsWith(BLOCK_VIEWS_PREFIX)) { const view = await this.#pointer(key); if (view !== undefined) await markManifest(view) }
        else if (kindOf(key) === 'hint') { const toc = await this.#pointer(key); if (toc !== undefined) await markToc(toc) }
      }
    }
    // Hints live while the TOC they name does.
    for (const key of objects.keys()) {
      if (kindOf(key) !== 'hint' || live.has(key)) continue
      const toc = await this.#pointer(key)
      if (toc !== undefined && live.has(layerKey(digestHex(toc)))) live.add(key)
    }

    const liveChunks = new Map<string, Map<number, number>>()
    const plain = new Map<string, number>()
    for (const d of liveTocs) {
      const refs = this.#tocs.get(d)!
      for (const [blob, chunks] of refs.chunks) {
        let m = liveChunks.get(blob)
        if (m === undefined) { m = new Map(); liveChunks.set(blob, m) }
        for (const [offset, clen] of chunks) m.set(offset, clen)
      }
      for (const [digest, len] of refs.plain) plain.set(digest, len)
    }
    const liveChunkBytes = new Map<string, number>()
    for (const [blob, chunks] of liveChunks) liveChunkBytes.set(blob, [...chunks.values()].reduce((a, b) => a + b, 0))
    let referencedPlainBytes = 0
    for (const m of liveManifests) referencedPlainBytes += this.#manifests.get(m)!.layerBytes
    const distinctPlainBytes = [...plain.values()].reduce((a, b) => a + b, 0)
    return { live, missing, liveChunkBytes, referencedPlainBytes, distinctPlainBytes }
  }

  async #manifest (digest: Digest): Promise<ManifestRefs | undefined> {
    const cached = this.#manifests.get(digest)
    if (cached !== undefined) return cached
    try {
      const m = await getManifest(this.#store, digest)
      let layerBytes = 0
      for (const l of m.layers) layerBytes += l.size
      const refs: ManifestRefs = { layers: m.layers.map(l => l.digest), ...(m.blockView === undefined ? {} : { blockView: m.blockView }), layerBytes }
      this.#manifests.set(digest, refs)
      return refs
    } catch (err) {
      if (err instanceof NotFoundError) return undefined
      throw err
    }
  }

  async #toc (digest: Digest): Promise<TocRefs | undefined> {
    const cached = this.#tocs.get(digest)
    if (cached !== undefined) return cached
    try {
      const toc = await getToc(this.#store, digest)
      const chunks = new Map<string, Map<number, number>>()
      const plain = new Map<string, number>()
      for (const c of toc.chunks) {
        const blob = toc.blobs[c.blob]!
        let m = chunks.get(blob)
        if (m === undefined) { m = new Map(); chunks.set(blob, m) }
        m.set(c.offset, c.compressedLength)
        plain.set(c.digest, c.length)
      }
      let fileBytes = 0
      for (const e of toc.entries) fileBytes += e.size
      const refs: TocRefs = { diffId: toc.diffId, blobs: toc.blobs, chunks, plain, fileBytes }
      this.#tocs.set(digest, refs)
      return refs
    } catch (err) {
      if (err instanceof NotFoundError) return undefined
      throw err
    }
  }

  /** The digest a pointer object (block-view pointer, layer hint) names, or undefined when missing or not a digest. */
  async #pointer (key: string): Promise<Digest | undefined> {
    try {
      const text = (await this.#store.get(key)).toString('utf8').trim()
      return isDigest(text) ? text : undefined
    } catch (err) {
      if (err instanceof NotFoundError) return undefined
      throw err
    }
  }
}
