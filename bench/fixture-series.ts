/**
 * The chunking bench's default input: the real Debian image series built by
 * fixtures/debian-images.ts into /var/cache/layerd-fixtures.
 *
 * Bench-only: may import anything.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { NotFoundError } from '../src/errors.js'
import { loadSeries, type SeriesImage } from './image-series.js'

/** Load {base, python-v1, python-v2} from the fixture manifest in `dir`. Async. Throws NotFoundError when the fixtures are not built. */
export async function loadFixtureSeries (dir: string): Promise<SeriesImage[]> {
  const path = join(dir, 'manifest.json')
  const manifest = JSON.parse(await readFile(path, 'utf8').catch(err => {
    throw new NotFoundError(`fixture manifest ${path} not found: build the fixtures first, or pass --image NAME=PATH`, { cause: err })
  }))
  return await loadSeries(Object.entries(manifest.images as Record<string, { layers: string[] }>).map(([name, img]) => `${name}=${img.layers.join(',')}`))
}
