/**
 * Export as a tar stream: the merged root filesystem, with whiteouts
 * applied, every attribute kept (mode incl. setuid/setgid/sticky, ids,
 * mtime, xattrs as binary-safe pax records, device numbers) and hardlinks as
 * tar hardlinks to the first path.
 *
 * Written to a temporary file next to the target and renamed at the end, so
 * a failed export never leaves a partial FILE.tar behind.
 *
 * May import: src/errors.ts, src/format/, this folder.
 */
import { open, rename, rm } from 'node:fs/promises'
import { UsageError } from '../errors.js'
import { dirname, basename, join } from 'node:path'
import { once } from 'node:events'
import type { Writable } from 'node:stream'
import { encodeTarHeader, padding, TAR_END, type TarHeader, type TarType } from '../format/tar-header.js'
import type { TocEntry } from '../format/toc.js'
import { ContentPipeline } from './content-pipeline.js'
import type { WalkItem } from './merged-walk.js'

const TAR_TYPES: Partial<Record<TocEntry['type'], TarType>> = {
  file: 'file', dir: 'dir', symlink: 'symlink', char: 'char', block: 'block', fifo: 'fifo'
}

export function tarHeaderFor (item: WalkItem): TarHeader {
  const e = item.entry
  const name = item.path === '' ? './' : item.path
  const h: TarHeader = {
    name, type: item.linkTo !== undefined ? 'hardlink' : TAR_TYPES[e.type]!, mode: e.mode, uid: e.uid, gid: e.gid, mtime: e.mtime,
    size: item.linkTo === undefined && e.type === 'file' ? e.size : 0
  }
  if (item.linkTo !== undefined) h.linkname = item.linkTo
  else if (e.type === 'symlink') h.linkname = e.target
  if (e.type === 'char' || e.type === 'block') { h.devMajor = e.devMajor; h.devMinor = e.devMinor }
  if (e.xattrs !== undefined) h.xattrs = new Map(Object.entries(e.xattrs).map(([k, v]) => [k, Buffer.from(v, 'base64')]))
  return h
}

/** Write the tar to `out`. Async; honours backpressure. Does not end `out`. */
export async function writeTar (items: readonly WalkItem[], pipeline: ContentPipeline, out: Writable): Promise<void> {
  const write = async (b: Buffer): Promise<void> => {
    if (!out.write(b)) await once(out, 'drain')
  }
  for (const item of items) {
    await write(encodeTarHeader(tarHeaderFor(item)))
    if (item.content === undefined) continue
    let written = 0
    for (let n = ContentPipeline.pieces(item.content.spans); n > 0; n--) {
      const piece = await pipeline.next()
      written += piece.length
      await write(piece)
    }
    if (written !== item.entry.size) throw new Error(`internal: ${item.path} produced ${written} bytes, expected ${item.entry.size}`)
    const pad = padding(written)
    if (pad > 0) await write(Buffer.alloc(pad))
  }
  await write(TAR_END)
}

/** Write the tar to `file` atomically (temp file + rename). Async. */
export async function writeTarFile (items: readonly WalkItem[], pipeline: ContentPipeline, file: string): Promise<void> {
  const tmp = join(dirname(file), `.${basename(file)}.tmp-${process.pid}-${Date.now()}`)
  // Opened before streaming, so a missing or unwritable directory is a rejection naming the file, and
  // never an 'error' event that nobody listens to (which ended the daemon: found by the control fuzz).
  let handle
  try {
    handle = await open(tmp, 'wx', 0o644)
  } catch (err) {
    throw new UsageError(`cannot export to ${file}: ${(err as Error).message}`, { cause: err })
  }
  const out = handle.createWriteStream()
  let failure: Error | undefined
  out.on('error', err => { failure ??= err })
  try {
    await writeTar(items, pipeline, out)
    out.end()
    await once(out, 'close')
    if (failure !== undefined) throw new UsageError(`cannot export to ${file}: ${failure.message}`, { cause: failure })
    await rename(tmp, file)
  } catch (err) {
    out.destroy()
    await rm(tmp, { force: true })
    throw err
  }
}
