/**
 * The chunking bench's default input: the real Debian image series of
 * fixtures/debian-images.ts ({base, python-v1, python-v2}, each an OCI
 * layout whose layer blobs are the layer tars), built on first use and
 * cached outside the repository. Layers shared between images have the same
 * digest and are loaded once.
 *
 * Bench-only: may import anything.
 */
import { readFile } from 'node:fs/promises'
import { isAbsolute, join } from 'node:path'
import { BadInputError, NotFoundError } from '../src/errors.js'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { loadSeries, type SeriesImage } from './image-series.js'

/** Order of the series: each image is pushed after the ones before it. */
export const FIXTURE_SERIES = ['base', 'python-v1', 'python-v2'] as const

/** The slice of an image record (fixtures/debian-image-build.ts) this bench reads. */
interface FixtureImage { ociLayout: string, layers: Array<{ digest: string }> }

/**
 * Load the fixture series, building it first if needed (1-3 minutes, see
 * fixtures/debian-images.ts), or from the fixture directory `dir` when
 * given. Async. Throws NotFoundError when `dir` holds no manifest.json,
 * BadInputError when the manifest lacks an image of the series.
 */
export async function loadFixtureSeries (dir?: string): Promise<{ dir: string, series: SeriesImage[] }> {
  let images: Record<string, FixtureImage | undefined>
  if (dir === undefined) {
    const built = await ensureDebianImages()
    dir = built.dir
    images = built.images
  } else {
    const path = join(dir, 'manifest.json')
    const text = await readFile(path, 'utf8').catch(err => {
      throw new NotFoundError(`fixture manifest ${path} not found: build it with fixtures/debian-images.ts, or pass --image NAME=PATH`, { cause: err })
    })
    images = (JSON.parse(text) as { images: Record<string, FixtureImage> }).images
  }
  const base = dir
  const specs = FIXTURE_SERIES.map(name => {
    const image = images[name]
    if (image === undefined) throw new BadInputError(`fixture manifest in ${base} has no image ${JSON.stringify(name)}`)
    const layout = isAbsolute(image.ociLayout) ? image.ociLayout : join(base, image.ociLayout)
    const blobs = image.layers.map(l => join(layout, 'blobs', 'sha256', l.digest.replace(/^sha256:/, '')))
    return `${name}=${blobs.join(',')}`
  })
  return { dir, series: await loadSeries(specs) }
}
