/**
 * `layerctl export NAME:TAG --format oci|oci-archive|docker-archive -o PATH`:
 * an image out of the store as a standard image, with one layer per stored
 * layer, so no image is locked in.
 *
 * Each layer is written as its own uncompressed tar. When the store holds
 * the layer's tar split (src/format/tar-split.ts: every byte of the pushed
 * tar but file content, which push keeps for every tar source), that is
 * the original tar, byte for byte: its digest is the source's diff_id,
 * checked as it is written. So an image pushed from a registry or a layout
 * and exported has the source's config diff_ids, and pushing the export
 * gives the same manifest digest in the store (its layers are found by
 * diff_id). Without a split (an image pushed from a directory, or before
 * splits existed) the tar is written from the TOC, in TOC (original tar)
 * order, with every attribute kept (as the rootfs export does) and real
 * whiteouts: a `whiteout` entry becomes `DIR/.wh.NAME`, an `opaque` one
 * `DIR/.wh..wh..opq`, hardlinks stay tar hardlinks; the same content, but
 * not the same bytes (`exact: false` in the result). The config is the
 * original one, except `rootfs.diff_ids`, which name the tars written. The
 * output is deterministic: exporting the same image twice gives the same
 * bytes, so export → push → export is a fixed point.
 *
 * - `oci`: an OCI image layout directory (`oci-layout`, `index.json`,
 *   `blobs/sha256/`), the image tagged with the ref's tag
 *   (`org.opencontainers.image.ref.name`), plus a docker `manifest.json`
 *   naming the same blobs, as `docker save` writes since docker 25, so that
 *   `tar -C DIR . | docker load` works on older engines too;
 * - `oci-archive`: the same layout as a tar;
 * - `docker-archive`: `manifest.json`, `<config hex>.json`,
 *   `<layer hex>/layer.tar`, with `RepoTags` [NAME:TAG].
 *
 * Built in a fresh sibling directory and renamed into place (archives: a
 * temporary file renamed), so a failed export leaves nothing.
 *
 * May import: src/errors.ts, src/format/, src/image/, this folder.
 */
import { createHash } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises'
import { once } from 'node:events'
import { basename, dirname, join } from 'node:path'
import { Transform, type Writable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { BadInputError, CorruptObjectError } from '../errors.js'
import { sha256Digest, type Digest } from '../format/digest.js'
import type { ImageRef } from '../format/ref.js'
import { encodeTarHeader, padding, TAR_END } from '../format/tar-header.js'
import { contentEntries, type TarSplit } from '../format/tar-split.js'
import type { LayerToc, TocEntry } from '../format/toc.js'
import type { LoadedImage } from '../image/load-image.js'
import type { ChunkBatchReader } from './chunk-batch-reader.js'
import { ContentPipeline } from './content-pipeline.js'
import { writeTar } from './export-tar.js'
import { contentsOf, type WalkItem } from './merged-walk.js'

export type ImageExportFormat = 'oci' | 'oci-archive' | 'docker-archive'
export const IMAGE_EXPORT_FORMATS: readonly ImageExportFormat[] = ['oci', 'oci-archive', 'docker-archive']

export interface ImageExportResult {
  format: ImageExportFormat
  path: string
  /** Digest of the OCI manifest written (also for docker-archive, where it is not stored). */
  manifest: Digest
  config: Digest
  /** `exact`: the layer tar is the pushed one, byte for byte (its digest is the source's diff_id), rebuilt from its tar split. */
  layers: Array<{ digest: Digest, size: number, exact: boolean }>
}

export interface ImageExportOptions {
  /** The stored tar split of a layer, if any (src/image/tar-splits.ts: loadTarSplit); without it, every tar is written from its TOC. */
  tarSplit?: (toc: LayerToc) => Promise<TarSplit | undefined>
}

const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json'
const OCI_INDEX = 'application/vnd.oci.image.index.v1+json'
const OCI_CONFIG = 'application/vnd.oci.image.config.v1+json'
const OCI_LAYER_TAR = 'application/vnd.oci.image.layer.v1.tar'
/** Fixed mtime of the archive's own members: the output is deterministic. */
const ARCHIVE_MTIME = 0

/** The tar entries of one layer, in TOC order, whiteouts and opaque markers as OCI writes them. Pure. */
export function layerTarItems (toc: LayerToc): WalkItem[] {
  return toc.entries.map((e): WalkItem => {
    if (e.type === 'whiteout' || e.type === 'opaque') {
      const slash = e.path.lastIndexOf('/')
      const path = e.type === 'opaque'
        ? (e.path === '' ? '.wh..wh..opq' : `${e.path}/.wh..wh..opq`)
        : `${e.path.slice(0, slash + 1)}.wh.${e.path.slice(slash + 1)}`
      const marker: TocEntry = { path, type: 'file', mode: e.mode, uid: e.uid, gid: e.gid, mtime: e.mtime, size: 0 }
      return { path, entry: marker }
    }
    if (e.type === 'hardlink') return { path: e.path, entry: e, linkTo: e.target! }
    if (e.type === 'file' && e.size > 0) return { path: e.path, entry: e, content: { toc, spans: e.spans ?? [] } }
    return { path: e.path, entry: e }
  })
}

/**
 * Export `image` (named `ref`) as `format` at `output`, which must not
 * exist. Async. Throws BadInputError when `output` exists, and the chunk
 * reader's errors; leaves nothing behind on failure.
 */
export async function exportImageLayout (image: LoadedImage, ref: ImageRef, reader: ChunkBatchReader, format: ImageExportFormat, output: string, opts: ImageExportOptions = {}): Promise<ImageExportResult> {
  if (await stat(output).then(() => true, () => false)) throw new BadInputError(`cannot export to ${output}: it exists`)
  const tmp = join(dirname(output), `.${basename(output)}.tmp-${process.pid}-${Date.now()}`)
  await mkdir(join(tmp, 'blobs', 'sha256'), { recursive: true })
  try {
    const layers: ImageExportResult['layers'] = []
    for (const [i, toc] of image.tocs.entries()) {
      const split = await opts.tarSplit?.(toc)
      const written = await writeLayerBlob(toc, reader, tmp, split === undefined ? undefined : { split, layer: `layer ${i + 1} of ${image.tocs.length}` })
      layers.push({ ...written, exact: split !== undefined })
    }
    const descriptors = layers.map(l => ({ digest: l.digest, size: l.size }))
    const config = { ...image.manifest.config, rootfs: { type: 'layers' as const, diff_ids: layers.map(l => l.digest) } }
    const configBlob = await writeBlob(tmp, Buffer.from(JSON.stringify(config)))
    const manifest = {
      schemaVersion: 2,
      mediaType: OCI_MANIFEST,
      config: { mediaType: OCI_CONFIG, ...configBlob },
      layers: descriptors.map(l => ({ mediaType: OCI_LAYER_TAR, ...l }))
    }
    const manifestBlob = await writeBlob(tmp, Buffer.from(JSON.stringify(manifest)))
    const repoTag = `${ref.name}:${ref.tag}`
    const result: ImageExportResult = { format, path: output, manifest: manifestBlob.digest, config: configBlob.digest, layers }
    const hex = (d: Digest): string => d.slice('sha256:'.length)
    if (format === 'docker-archive') {
      const members: ArchiveMember[] = [
        { name: 'manifest.json', bytes: Buffer.from(JSON.stringify([{ Config: `${hex(configBlob.digest)}.json`, RepoTags: [repoTag], Layers: layers.map(l => `${hex(l.digest)}/layer.tar`) }])) },
        { name: `${hex(configBlob.digest)}.json`, file: blobFile(tmp, configBlob.digest) },
        ...layers.flatMap((l): ArchiveMember[] => [{ name: `${hex(l.digest)}/`, dir: true }, { name: `${hex(l.digest)}/layer.tar`, file: blobFile(tmp, l.digest) }])
      ]
      await writeArchive(members, output)
      await rm(tmp, { recursive: true, force: true })
      return result
    }
    const index = {
      schemaVersion: 2,
      mediaType: OCI_INDEX,
      manifests: [{ mediaType: OCI_MANIFEST, ...manifestBlob, annotations: { 'io.containerd.image.name': repoTag, 'org.opencontainers.image.ref.name': ref.tag } }]
    }
    const layoutFiles: Array<[string, Buffer]> = [
      ['oci-layout', Buffer.from(JSON.stringify({ imageLayoutVersion: '1.0.0' }))],
      ['index.json', Buffer.from(JSON.stringify(index))],
      ['manifest.json', Buffer.from(JSON.stringify([{ Config: `blobs/sha256/${hex(configBlob.digest)}`, RepoTags: [repoTag], Layers: layers.map(l => `blobs/sha256/${hex(l.digest)}`) }]))]
    ]
    if (format === 'oci') {
      for (const [name, bytes] of layoutFiles) await writeFile(join(tmp, name), bytes)
      await rename(tmp, output)
      return result
    }
    const blobs = [...new Set([configBlob.digest, manifestBlob.digest, ...layers.map(l => l.digest)])].sort()
    await writeArchive([
      ...layoutFiles.map(([name, bytes]) => ({ name, bytes })),
      { name: 'blobs/', dir: true },
      { name: 'blobs/sha256/', dir: true },
      ...blobs.map(d => ({ name: `blobs/sha256/${hex(d)}`, file: blobFile(tmp, d) }))
    ], output)
    await rm(tmp, { recursive: true, force: true })
    return result
  } catch (err) {
    await rm(tmp, { recursive: true, force: true })
    throw err
  }
}

function blobFile (dir: string, digest: Digest): string {
  return join(dir, 'blobs', 'sha256', digest.slice('sha256:'.length))
}

async function writeBlob (dir: string, bytes: Buffer): Promise<{ digest: Digest, size: number }> {
  const digest = sha256Digest(bytes)
  await writeFile(blobFile(dir, digest), bytes)
  return { digest, size: bytes.length }
}

/**
 * One layer's tar into `dir/blobs/sha256/`, hashed as it is written: the
 * original tar from its split when given (its digest must be the TOC's
 * diff_id: CorruptObjectError otherwise), else written from the TOC.
 */
async function writeLayerBlob (toc: LayerToc, reader: ChunkBatchReader, dir: string, original?: { split: TarSplit, layer: string }): Promise<{ digest: Digest, size: number }> {
  const partial = join(dir, `.layer-${process.hrtime.bigint()}`)
  const file = createWriteStream(partial, { flags: 'wx', mode: 0o644 })
  const hash = createHash('sha256')
  let size = 0
  const hashing = new Transform({
    transform (chunk: Buffer, _enc, cb) { hash.update(chunk); size += chunk.length; cb(null, chunk) }
  })
  hashing.pipe(file)
  try {
    if (original !== undefined) await writeSplitTar(toc, original.split, reader, hashing)
    else {
      const items = layerTarItems(toc)
      await writeTar(items, new ContentPipeline(reader, contentsOf(items)), hashing)
    }
    hashing.end()
    await finished(file)
  } catch (err) {
    hashing.destroy()
    file.destroy()
    throw err
  }
  const digest: Digest = `sha256:${hash.digest('hex')}`
  if (original !== undefined && digest !== toc.diffId) {
    await rm(partial, { force: true })
    throw new CorruptObjectError(`${original.layer}: the tar rebuilt from its tar split has digest ${digest}, not the layer's diff_id ${toc.diffId} (a corrupt tar-splits/ object)`)
  }
  await rename(partial, blobFile(dir, digest))
  return { digest, size }
}

/** The original tar: the split's raw runs, with the TOC's file contents in its holes. Does not end `out`. */
async function writeSplitTar (toc: LayerToc, split: TarSplit, reader: ChunkBatchReader, out: Writable): Promise<void> {
  const write = async (b: Uint8Array): Promise<void> => { if (b.length > 0 && !out.write(b)) await once(out, 'drain') }
  const files = contentEntries(toc)
  const pipeline = new ContentPipeline(reader, files.map(e => ({ toc, spans: e.spans ?? [] })))
  for (const [i, raw] of split.raw.entries()) {
    await write(raw)
    const file = files[i]
    if (file === undefined) continue
    let written = 0
    for (let n = ContentPipeline.pieces(file.spans ?? []); n > 0; n--) {
      const piece = await pipeline.next()
      written += piece.length
      await write(piece)
    }
    if (written !== split.holes[i]) throw new Error(`internal: ${JSON.stringify(file.path)} produced ${written} bytes for a hole of ${split.holes[i]}`)
  }
}

type ArchiveMember = { name: string, bytes: Buffer } | { name: string, file: string } | { name: string, dir: true }

/** A plain tar of `members` at `output` (temporary file + rename). */
async function writeArchive (members: readonly ArchiveMember[], output: string): Promise<void> {
  const tmp = join(dirname(output), `.${basename(output)}.tmp-${process.pid}-${Date.now()}`)
  const out = createWriteStream(tmp, { flags: 'wx', mode: 0o644 })
  const write = async (b: Buffer): Promise<void> => { if (!out.write(b)) await once(out, 'drain') }
  try {
    for (const m of members) {
      if ('dir' in m) {
        await write(encodeTarHeader({ name: m.name, type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: ARCHIVE_MTIME, size: 0 }))
        continue
      }
      const size = 'bytes' in m ? m.bytes.length : (await stat(m.file)).size
      await write(encodeTarHeader({ name: m.name, type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: ARCHIVE_MTIME, size }))
      if ('bytes' in m) await write(m.bytes)
      else await copyInto(m.file, size, out)
      const pad = padding(size)
      if (pad > 0) await write(Buffer.alloc(pad))
    }
    await write(TAR_END)
    out.end()
    await finished(out)
    await rename(tmp, output)
  } catch (err) {
    out.destroy()
    await rm(tmp, { force: true })
    throw err
  }
}

async function copyInto (file: string, size: number, out: Writable): Promise<void> {
  let copied = 0
  for await (const chunk of createReadStream(file, { highWaterMark: 1024 * 1024 })) {
    copied += (chunk as Buffer).length
    if (!out.write(chunk)) await once(out, 'drain')
  }
  if (copied !== size) throw new Error(`internal: ${file} changed size while archived (${copied} of ${size} bytes)`)
}
