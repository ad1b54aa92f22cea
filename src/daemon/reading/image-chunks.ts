/**
 * The chunks an image (or a layer chain) references, for prefetching it
 * whole. Pure: TOCs in, chunk references out.
 *
 * May import: src/format/, src/image/ (types).
 */
import { resolveChunk, type ChunkRef } from '../../format/toc.js'
import type { LoadedImage } from '../../image/load-image.js'

/** Every distinct chunk an image references, in blob order (so prefetch GETs merge). Sync. */
export function allChunks (image: Pick<LoadedImage, 'tocs'>): ChunkRef[] {
  const seen = new Set<string>()
  const refs: ChunkRef[] = []
  for (const toc of image.tocs) {
    for (let i = 0; i < toc.chunks.length; i++) {
      const ref = resolveChunk(toc, i)
      if (seen.has(ref.digest)) continue
      seen.add(ref.digest)
      refs.push(ref)
    }
  }
  return refs.sort((a, b) => (a.blob === b.blob ? a.offset - b.offset : a.blob < b.blob ? -1 : 1))
}
