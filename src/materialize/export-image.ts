/**
 * `layerctl export`: an image's merged root filesystem as a tar file or a
 * directory. Reads chunks through the node's fetcher and cache, so an image
 * already pulled exports without touching the store.
 *
 * May import: src/errors.ts, src/format/, src/image/, this folder.
 */
import { mergeLayers } from '../format/merge.js'
import type { LoadedImage } from '../image/load-image.js'
import type { ChunkBatchReader } from './chunk-batch-reader.js'
import { ContentPipeline } from './content-pipeline.js'
import { writeDirectory } from './export-dir.js'
import { writeTarFile } from './export-tar.js'
import { contentsOf, planExport } from './merged-walk.js'

export type ExportTarget = { tarFile: string } | { directory: string }

export interface ExportResult { entries: number, contentBytes: number, skippedConflicts: number }

/** Export `image` to `target`. Async; the target appears complete or not at all. */
export async function exportImage (image: LoadedImage, reader: ChunkBatchReader, target: ExportTarget): Promise<ExportResult> {
  const tree = mergeLayers(image.tocs)
  const items = planExport(tree, image.tocs)
  const pipeline = new ContentPipeline(reader, contentsOf(items))
  if ('tarFile' in target) await writeTarFile(items, pipeline, target.tarFile)
  else await writeDirectory(items, pipeline, target.directory)
  const contentBytes = items.reduce((n, i) => n + (i.content === undefined ? 0 : i.entry.size), 0)
  return { entries: items.length, contentBytes, skippedConflicts: tree.conflicts.length }
}
