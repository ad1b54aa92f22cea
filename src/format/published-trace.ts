/**
 * Published access traces: the chunks an image's workload read first, in
 * order, kept in the store beside its manifest (`traces/<manifest hex>`), so
 * that a node that never ran the image prefetches them at mount, in
 * parallel, behind the demand reads. The idea of Nydus's prefetch list and
 * eStargz's prioritized files, recorded from a real run rather than
 * declared at build time.
 *
 * A chunk is named by its place in the image, `[layer index, chunk index]`
 * into the manifest's layers and their TOCs, not by blob location: the trace
 * stays small, and it is checked against the TOCs when it is read. It is a
 * hint: a wrong entry costs bytes, never correctness (every chunk is
 * verified by digest on fetch).
 *
 * Pure: no I/O.
 */
import { CorruptObjectError } from '../errors.js'
import type { Digest } from './digest.js'
import { resolveChunk, type ChunkRef, type LayerToc } from './toc.js'

export const TRACE_MEDIA_TYPE = 'application/vnd.layerd.trace.v1+json'
/** A trace longer than this is refused (hostile store): more chunks than any image we serve touches first. */
export const MAX_TRACE_ENTRIES = 1_000_000

export interface PublishedTrace {
  schemaVersion: 1
  mediaType: typeof TRACE_MEDIA_TYPE
  /** The manifest the indices refer to. */
  manifest: Digest
  /** `[layer index, chunk index]`, first read first. */
  chunks: Array<[number, number]>
}

/**
 * The trace of `refs` (chunk refs in read order) over `tocs` (the manifest's
 * layers, bottom first), as stored bytes. A chunk in several layers is named
 * by its first; refs the TOCs do not hold are left out. Sync.
 */
export function encodePublishedTrace (manifest: Digest, tocs: readonly LayerToc[], refs: readonly ChunkRef[]): Buffer {
  const where = new Map<string, [number, number]>()
  tocs.forEach((toc, layer) => toc.chunks.forEach((c, i) => { if (!where.has(c.digest)) where.set(c.digest, [layer, i]) }))
  const seen = new Set<string>()
  const chunks: Array<[number, number]> = []
  for (const r of refs) {
    const at = where.get(r.digest)
    if (at === undefined || seen.has(r.digest)) continue
    seen.add(r.digest)
    chunks.push(at)
  }
  const trace: PublishedTrace = { schemaVersion: 1, mediaType: TRACE_MEDIA_TYPE, manifest, chunks }
  return Buffer.from(JSON.stringify(trace))
}

/**
 * The chunk refs of a stored trace of `manifest` over its `tocs`. Sync.
 * Throws CorruptObjectError naming `source` when the bytes are not a trace of
 * this manifest or an index is out of range.
 */
export function decodePublishedTrace (bytes: Uint8Array, manifest: Digest, tocs: readonly LayerToc[], source: string): ChunkRef[] {
  const bad = (why: string): never => { throw new CorruptObjectError(`${source}: not a layerd access trace of ${manifest}: ${why}`) }
  let value: unknown
  try { value = JSON.parse(Buffer.from(bytes).toString('utf8')) } catch { return bad('not JSON') }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return bad('not an object')
  const t = value as Partial<PublishedTrace>
  if (t.schemaVersion !== 1 || t.mediaType !== TRACE_MEDIA_TYPE) return bad(`schemaVersion ${JSON.stringify(t.schemaVersion)}, mediaType ${JSON.stringify(t.mediaType)}`)
  if (t.manifest !== manifest) return bad(`it names manifest ${JSON.stringify(t.manifest)}`)
  if (!Array.isArray(t.chunks)) return bad('chunks is not a list')
  if (t.chunks.length > MAX_TRACE_ENTRIES) return bad(`${t.chunks.length} entries (at most ${MAX_TRACE_ENTRIES})`)
  return t.chunks.map((e, k) => {
    const [layer, index] = Array.isArray(e) && e.length === 2 ? e : [undefined, undefined]
    const toc = typeof layer === 'number' ? tocs[layer] : undefined
    if (toc === undefined || typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= toc.chunks.length) {
      return bad(`entry ${k} (${JSON.stringify(e)}) is not [layer, chunk] of this image`)
    }
    return resolveChunk(toc, index)
  })
}
