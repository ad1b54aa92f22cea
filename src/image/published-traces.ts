/**
 * Published access traces in a store (format: src/format/published-trace.ts):
 * read at mount, written by `layerctl trace publish`.
 *
 * No gc lease is taken: nothing refers to a trace, and gc keeps it exactly
 * while its manifest lives (src/gc/store-graph.ts). A trace written for a
 * manifest that a gc is deleting is swept by the next gc.
 *
 * May import: src/errors.ts, src/format/, src/store/.
 */
import { NotFoundError } from '../errors.js'
import { digestHex, type Digest } from '../format/digest.js'
import { traceKey } from '../format/keys.js'
import { decodePublishedTrace, encodePublishedTrace } from '../format/published-trace.js'
import type { ChunkRef, LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'

/**
 * The published trace of `manifest` (its `tocs` bottom first) as chunk refs,
 * or undefined when none is published. Async. Throws CorruptObjectError for
 * a trace that is not one of this image, and what the store throws.
 */
export async function getPublishedTrace (store: Pick<ObjectStore, 'get' | 'url'>, manifest: Digest, tocs: readonly LayerToc[]): Promise<ChunkRef[] | undefined> {
  const key = traceKey(digestHex(manifest))
  let bytes: Buffer
  try {
    bytes = await store.get(key)
  } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
  return decodePublishedTrace(bytes, manifest, tocs, `${store.url} ${key}`)
}

/** Publish `refs` (read order) as the trace of `manifest`, replacing any earlier one. Async. Returns the key and the chunks written. */
export async function putPublishedTrace (store: Pick<ObjectStore, 'put'>, manifest: Digest, tocs: readonly LayerToc[], refs: readonly ChunkRef[]): Promise<{ key: string, chunks: number }> {
  const key = traceKey(digestHex(manifest))
  const bytes = encodePublishedTrace(manifest, tocs, refs)
  await store.put(key, bytes)
  return { key, chunks: (JSON.parse(bytes.toString('utf8')) as { chunks: unknown[] }).chunks.length }
}
