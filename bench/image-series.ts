/**
 * Loads an image series (images made of layers, layers made of files) into
 * memory for bench/chunking.ts: every regular file's path and content, in
 * tar order. Layer tars may be plain, gzip or zstd; a directory counts as
 * one layer, walked in sorted order (like `tar --sort=name`), hardlinks read
 * once. Layers that appear in several images (same file digest) are loaded
 * once and share one `SeriesLayer`, as a store would dedup them by digest.
 *
 * Bench-only: may import anything.
 */
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { lstat, open, readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { createGunzip } from 'node:zlib'
import tar from 'tar-stream'
import { DecompressStream } from 'zstd-napi'
import { BadInputError, NotFoundError } from '../src/errors.js'

export interface SeriesFile { path: string, data: Uint8Array }

export interface SeriesLayer {
  /** Identity for layer-level dedup: sha256 of the tar file, or `dir:` + path. */
  id: string
  /** Where it came from, for output. */
  source: string
  files: SeriesFile[]
  /** Sum of file sizes. */
  bytes: number
}

export interface SeriesImage { name: string, layers: SeriesLayer[] }

/** Read every regular file of a layer tar (plain, gzip or zstd). Async. Throws BadInputError on a malformed tar. */
export async function loadLayerTar (path: string): Promise<SeriesLayer> {
  const head = Buffer.alloc(4)
  const fh = await open(path, 'r')
  try { await fh.read(head, 0, 4, 0) } finally { await fh.close() }
  let input: Readable = createReadStream(path, { highWaterMark: 1 << 20 })
  if (head[0] === 0x1f && head[1] === 0x8b) input = input.pipe(createGunzip())
  else if (head.readUInt32LE(0) === 0xfd2fb528) input = input.pipe(new DecompressStream())
  const files: SeriesFile[] = []
  let bytes = 0
  const extract = tar.extract()
  input.on('error', err => extract.destroy(err))
  input.pipe(extract)
  try {
    for await (const entry of extract) {
      const pieces: Buffer[] = []
      for await (const piece of entry) pieces.push(piece as Buffer)
      const type = entry.header.type
      if ((type === 'file' || type === 'contiguous-file') && (entry.header.size ?? 0) > 0) {
        const data = Buffer.concat(pieces)
        files.push({ path: entry.header.name, data })
        bytes += data.length
      }
    }
  } catch (err) {
    throw new BadInputError(`cannot read layer tar ${path}: ${(err as Error).message}`, { cause: err })
  }
  return { id: await fileDigest(path), source: path, files, bytes }
}

/** Read every regular file under `root`, sorted by path, each inode once. Async. */
export async function loadLayerDir (root: string): Promise<SeriesLayer> {
  const files: SeriesFile[] = []
  const seen = new Set<string>()
  let bytes = 0
  const walk = async (rel: string): Promise<void> => {
    const names = (await readdir(join(root, rel))).sort()
    for (const name of names) {
      const relPath = rel === '' ? name : `${rel}/${name}`
      const st = await lstat(join(root, relPath))
      if (st.isDirectory()) await walk(relPath)
      else if (st.isFile() && st.size > 0) {
        const inode = `${st.dev}:${st.ino}`
        if (seen.has(inode)) continue
        seen.add(inode)
        const data = await readFile(join(root, relPath))
        files.push({ path: relPath, data })
        bytes += data.length
      }
    }
  }
  await walk('')
  return { id: `dir:${root}`, source: root, files, bytes }
}

/**
 * Load images given as `name=path[,path…]`, each path a layer tar or a
 * directory, lowest layer first. Async. Identical layer tars are loaded once.
 */
export async function loadSeries (specs: string[]): Promise<SeriesImage[]> {
  const byPath = new Map<string, SeriesLayer>()
  const byId = new Map<string, SeriesLayer>()
  const images: SeriesImage[] = []
  for (const spec of specs) {
    const eq = spec.indexOf('=')
    if (eq <= 0) throw new BadInputError(`image spec ${JSON.stringify(spec)} is not NAME=PATH[,PATH…]`)
    const layers: SeriesLayer[] = []
    for (const path of spec.slice(eq + 1).split(',')) {
      let layer = byPath.get(path)
      if (layer === undefined) {
        const st = await lstat(path).catch(err => { throw new NotFoundError(`layer ${path} of ${spec.slice(0, eq)} not found`, { cause: err }) })
        layer = st.isDirectory() ? await loadLayerDir(path) : await loadLayerTar(path)
        layer = byId.get(layer.id) ?? layer
        byId.set(layer.id, layer)
        byPath.set(path, layer)
      }
      layers.push(layer)
    }
    images.push({ name: spec.slice(0, eq), layers })
  }
  return images
}

async function fileDigest (path: string): Promise<string> {
  const h = createHash('sha256')
  for await (const piece of createReadStream(path, { highWaterMark: 1 << 20 })) h.update(piece as Buffer)
  return h.digest('hex')
}
