/**
 * What `layerctl inspect` reports about an image: layers, sizes, config, and
 * how much chunk dedup saves within it.
 *
 * May import: src/format/, this folder.
 */
import type { Digest } from '../format/digest.js'
import type { OciImageConfig } from '../format/manifest.js'
import type { LoadedImage } from './load-image.js'

export interface ImageReport {
  manifest: Digest
  layers: Array<{ digest: Digest, diffId: Digest, entries: number, plainBytes: number, storedBytes: number, chunks: number }>
  /** Plain bytes of file content, summed over layers. */
  imageBytes: number
  /** Compressed bytes of the distinct chunks the image references (what a full pull fetches). */
  storedBytes: number
  /** Plain bytes of the distinct chunks: imageBytes / uniquePlainBytes is the dedup ratio within the image. */
  uniquePlainBytes: number
  dedupRatio: number
  config: OciImageConfig
  base?: { ref: string, manifest: Digest, layers: number }
}

export function inspectImage (image: LoadedImage): ImageReport {
  const seen = new Set<string>()
  let storedBytes = 0
  let uniquePlainBytes = 0
  const layers = image.manifest.layers.map((l, i) => {
    const toc = image.tocs[i]!
    for (const c of toc.chunks) {
      if (seen.has(c.digest)) continue
      seen.add(c.digest)
      storedBytes += c.compressedLength
      uniquePlainBytes += c.length
    }
    return { digest: l.digest, diffId: l.diffId, entries: l.entries, plainBytes: l.size, storedBytes: l.storedBytes, chunks: toc.chunks.length }
  })
  const imageBytes = layers.reduce((n, l) => n + l.plainBytes, 0)
  return {
    manifest: image.digest,
    layers,
    imageBytes,
    storedBytes,
    uniquePlainBytes,
    dedupRatio: uniquePlainBytes === 0 ? 1 : imageBytes / uniquePlainBytes,
    config: image.manifest.config,
    ...(image.manifest.base === undefined ? {} : { base: image.manifest.base })
  }
}
