/**
 * Export into a directory: the merged root filesystem, written so that it
 * can never land outside the target, whatever the image holds.
 *
 * - The tree is built in a fresh sibling directory and renamed onto the
 *   target at the end (the target must be absent or empty), so a failed
 *   export leaves nothing half-written behind.
 * - Every path is created by this code, in walk order (parents first) with
 *   O_EXCL | O_NOFOLLOW: nothing existing is ever followed or overwritten.
 * - Order per entry: content, owner, mode (after chown, which clears
 *   setuid/setgid), xattrs (after chown, which clears file capabilities),
 *   times. Directories get their attributes last, deepest first, so a 0555
 *   directory can still be filled and its mtime is not disturbed.
 * - All-zero runs of file content become holes.
 *
 * May import: src/errors.ts, src/format/, src/native.ts, this folder.
 */
import { constants } from 'node:fs'
import { chmod, lchown, link, lutimes, mkdir, open, readdir, rename, rm, rmdir, symlink } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { UsageError } from '../errors.js'
import type { TocEntry } from '../format/toc.js'
import { lsetxattr, mknod } from '../native.js'
import { ContentPipeline } from './content-pipeline.js'
import type { WalkItem } from './merged-walk.js'

const HOLE_MIN_BYTES = 4096
const S_IFCHR = 0o020000
const S_IFBLK = 0o060000
const S_IFIFO = 0o010000

/** Export to `target`. Async. Throws UsageError if `target` exists and is not an empty directory. */
export async function writeDirectory (items: readonly WalkItem[], pipeline: ContentPipeline, target: string): Promise<void> {
  const existing = await readdir(target).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined
    if (err.code === 'ENOTDIR') throw new UsageError(`cannot export to ${target}: it exists and is not a directory`)
    throw err
  })
  if (existing !== undefined && existing.length > 0) throw new UsageError(`cannot export to ${target}: the directory is not empty`)
  await mkdir(dirname(target), { recursive: true })
  const work = join(dirname(target), `.${basename(target)}.export-${process.pid}-${Date.now()}`)
  await mkdir(work, { mode: 0o700 })
  try {
    const dirs: Array<{ path: string, entry: TocEntry }> = []
    for (const item of items) {
      const path = join(work, item.path)
      if (item.entry.type === 'dir') {
        if (item.path !== '') await mkdir(path, { mode: 0o700 })
        dirs.push({ path, entry: item.entry })
      } else {
        await writeNonDirectory(item, path, pipeline, work)
      }
    }
    for (const { path, entry } of dirs.reverse()) await applyAttributes(path, entry)
    if (existing !== undefined) await rmdir(target)
    await rename(work, target)
  } catch (err) {
    await rm(work, { recursive: true, force: true })
    throw err
  }
}

async function writeNonDirectory (item: WalkItem, path: string, pipeline: ContentPipeline, root: string): Promise<void> {
  const e = item.entry
  if (item.linkTo !== undefined) {
    await link(join(root, item.linkTo), path)
    return
  }
  switch (e.type) {
    case 'file': await writeFile(item, path, pipeline); break
    case 'symlink': await symlink(e.target!, path); break
    case 'char': mknod(path, S_IFCHR | 0o600, e.devMajor ?? 0, e.devMinor ?? 0); break
    case 'block': mknod(path, S_IFBLK | 0o600, e.devMajor ?? 0, e.devMinor ?? 0); break
    case 'fifo': mknod(path, S_IFIFO | 0o600, 0, 0); break
    default: throw new Error(`internal: cannot export entry type ${e.type} at ${item.path}`)
  }
  if (e.type !== 'file') await applyAttributes(path, e)
}

async function writeFile (item: WalkItem, path: string, pipeline: ContentPipeline): Promise<void> {
  const fh = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
  try {
    let pos = 0
    for (let n = item.content === undefined ? 0 : ContentPipeline.pieces(item.content.spans); n > 0; n--) {
      const piece = await pipeline.next()
      if (piece.length < HOLE_MIN_BYTES || !isAllZero(piece)) await fh.write(piece, 0, piece.length, pos)
      pos += piece.length
    }
    await fh.truncate(pos)
    await fh.chown(item.entry.uid, item.entry.gid)
    await fh.chmod(item.entry.mode)
  } finally {
    await fh.close()
  }
  setXattrs(path, item.entry)
  await setTimes(path, item.entry.mtime)
}

/** Owner, mode, xattrs, times, in that order, without following a symlink. */
async function applyAttributes (path: string, e: TocEntry): Promise<void> {
  await lchown(path, e.uid, e.gid)
  if (e.type !== 'symlink') await chmod(path, e.mode)
  setXattrs(path, e)
  await setTimes(path, e.mtime)
}

/** Date objects, not numbers: Node replaces a negative number of seconds by the current time. */
async function setTimes (path: string, mtimeSeconds: number): Promise<void> {
  const t = new Date(mtimeSeconds * 1000)
  await lutimes(path, t, t)
}

function setXattrs (path: string, e: TocEntry): void {
  for (const [name, value] of Object.entries(e.xattrs ?? {})) lsetxattr(path, name, Buffer.from(value, 'base64'), 0)
}

const ZERO_PAGE = Buffer.alloc(HOLE_MIN_BYTES)
function isAllZero (b: Buffer): boolean {
  for (let off = 0; off < b.length; off += HOLE_MIN_BYTES) {
    const end = Math.min(b.length, off + HOLE_MIN_BYTES)
    if (b.compare(ZERO_PAGE, 0, end - off, off, end) !== 0) return false
  }
  return true
}
