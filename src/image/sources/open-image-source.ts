/**
 * openImageSource: detect what kind of image a path holds and open it.
 *
 * - a directory with an `oci-layout` file → OCI image layout;
 * - any other directory → a one-layer image of the tree;
 * - a gzip or zstd file (by magic bytes) → a compressed rootfs tar;
 * - a tar (ustar/GNU magic and a valid checksum) whose members are only
 *   image-archive names (manifest.json, index.json, oci-layout, blobs/,
 *   `<hex>.json`, `<hex>/…`, repositories) → a docker-archive when it has a
 *   manifest.json listing images, else an OCI archive when it has
 *   oci-layout and index.json (an archive with both is read as OCI when
 *   `prefer: 'oci-archive'`);
 * - any other tar → a plain rootfs tar (the scan stops at the first member
 *   that no image archive would hold, so this costs one header read).
 * Anything else is refused with BadInputError.
 *
 * May import: src/errors.ts, src/format/, the modules next to it.
 */
import { open, stat } from 'node:fs/promises'
import { BadInputError, NotFoundError } from '../../errors.js'
import { detectCompression } from './decompress.js'
import { isDockerArchive, openDockerArchive } from './docker-archive-source.js'
import { openDirectory } from './directory-source.js'
import type { ImageSource, OpenImageSourceOptions } from './image-source.js'
import { ingestContext } from './ingest-policy.js'
import { archiveFiles, directoryFiles } from './layout-files.js'
import { openOciLayout } from './oci-layout-source.js'
import { openRootfsTar } from './rootfs-tar-source.js'
import { TarIndex } from './tar-index.js'
import { TAR_BLOCK_BYTES, looksLikeTarHeader } from './tar-header.js'

const ARCHIVE_TOP_LEVEL = /^(|manifest\.json|repositories|index\.json|oci-layout|blobs|[0-9a-f]{64}(\.json|\.tar)?)$/

/**
 * Open the image at `path`, whatever its kind. Async. Reads only what
 * detection and up-front checks need (headers, manifests, configs); layers
 * are read when their entries are. Throws NotFoundError when `path` does not
 * exist, UnsupportedError for xz/bzip2 input, BadInputError naming the input
 * for anything unreadable, malformed, ambiguous or of an unknown kind.
 */
export async function openImageSource (path: string, opts: OpenImageSourceOptions = {}): Promise<ImageSource> {
  const ctx = ingestContext(opts)
  let st
  try { st = await stat(path) } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new NotFoundError(`cannot push ${path}: no such file or directory`, { cause: err })
    throw new BadInputError(`cannot push ${path}: ${(err as Error).message}`, { cause: err })
  }
  if (st.isDirectory()) {
    const layoutMarker = await stat(`${path}/oci-layout`).catch(() => undefined)
    if (layoutMarker?.isFile() === true) return await openOciLayout(directoryFiles(path, `OCI layout ${path}`), 'oci-layout', path, ctx, opts.tag)
    return openDirectory(path, ctx)
  }
  if (!st.isFile()) throw unknownInput(path)

  const head = await readHead(path)
  if (detectCompression(head, `cannot push ${path}`) !== 'none') return openRootfsTar(path, st.size, ctx)
  if (!looksLikeTarHeader(head)) throw unknownInput(path)
  const index = await TarIndex.scan(path, {
    maxMembers: ctx.limits.maxEntries,
    accept: name => ARCHIVE_TOP_LEVEL.test(name.split('/', 1)[0]!)
  })
  if (index !== undefined) {
    const isOci = index.resolveFile('oci-layout') !== undefined && index.resolveFile('index.json') !== undefined
    if (isOci && opts.prefer === 'oci-archive') return await openOciLayout(archiveFiles(index, `OCI archive ${path}`), 'oci-archive', path, ctx, opts.tag)
    if (await isDockerArchive(index)) return await openDockerArchive(index, path, ctx, opts.tag)
    if (isOci) return await openOciLayout(archiveFiles(index, `OCI archive ${path}`), 'oci-archive', path, ctx, opts.tag)
  }
  return openRootfsTar(path, st.size, ctx)
}

function unknownInput (path: string): BadInputError {
  return new BadInputError(`cannot push ${path}: not an OCI layout, OCI archive, docker-archive, tar (plain/gzip/zstd) or directory`)
}

async function readHead (path: string): Promise<Buffer> {
  let fh
  try { fh = await open(path, 'r') } catch (err) {
    throw new BadInputError(`cannot push ${path}: ${(err as Error).message}`, { cause: err })
  }
  try {
    const buf = Buffer.alloc(TAR_BLOCK_BYTES)
    const { bytesRead } = await fh.read(buf, 0, TAR_BLOCK_BYTES, 0)
    return buf.subarray(0, bytesRead)
  } finally {
    await fh.close()
  }
}
