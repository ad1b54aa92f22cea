/**
 * Measures a directory tree for sizing its ext4 block view: how many inodes
 * it needs and how many 4 KiB blocks its content, directories, long symlinks
 * and extended attributes take. The figures depend only on the tree's
 * content (not on the filesystem it sits on), so the size chosen from them,
 * and with it the block view, is the same for the same tree anywhere.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { lstat, opendir, readlink } from 'node:fs/promises'
import { join } from 'node:path'
import { NotFoundError } from '../errors.js'

export const BLOCK_BYTES = 4096
/** Inline space for a symlink target in the inode (i_block). */
const INLINE_SYMLINK_BYTES = 60
/** Directory entry: 8-byte header + name, padded to 4. */
const DIRENT_HEADER_BYTES = 8

export interface TreeMeasure {
  /** Entries including the root directory; hardlinks count once. */
  inodes: number
  /** 4 KiB blocks of regular file content, holes counted as data (an upper bound). */
  dataBlocks: number
  /** 4 KiB blocks of directory entries, long symlink targets and extent tree blocks (an estimate, rounded up; xattr blocks are left to the caller's slack). */
  metadataBlocks: number
  /** Sum of regular file sizes. */
  fileBytes: number
}

/**
 * Walk `root` (not following symlinks) and measure it. Async. Throws
 * NotFoundError when `root` is not a directory.
 */
export async function measureTree (root: string): Promise<TreeMeasure> {
  const st = await lstat(root).catch(err => { throw new NotFoundError(`cannot measure ${root}: ${(err as Error).message}`, { cause: err }) })
  if (!st.isDirectory()) throw new NotFoundError(`cannot measure ${root}: not a directory`)
  const m: TreeMeasure = { inodes: 0, dataBlocks: 0, metadataBlocks: 0, fileBytes: 0 }
  const seenInodes = new Set<string>()
  const visitDir = async (dir: string): Promise<void> => {
    m.inodes++
    let direntBytes = 24 // '.' and '..'
    const handle = await opendir(dir)
    const children: string[] = []
    for await (const e of handle) {
      direntBytes += DIRENT_HEADER_BYTES + Math.ceil(Buffer.byteLength(e.name) / 4) * 4
      children.push(e.name)
    }
    // Indexed (htree) directories carry interior blocks too: allow a quarter more.
    m.metadataBlocks += Math.ceil(direntBytes * 1.25 / BLOCK_BYTES)
    for (const name of children) {
      const p = join(dir, name)
      const s = await lstat(p, { bigint: true })
      if (s.isDirectory()) { await visitDir(p); continue }
      if (Number(s.nlink) > 1) {
        const id = `${s.dev}:${s.ino}`
        if (seenInodes.has(id)) continue
        seenInodes.add(id)
      }
      m.inodes++
      if (s.isFile()) {
        const size = Number(s.size)
        m.fileBytes += size
        // Size, not allocation: a hole-aware count would depend on the source filesystem.
        const blocks = Math.ceil(size / BLOCK_BYTES)
        m.dataBlocks += blocks
        // Beyond 4 extents, an extent tree block per ~340 extents of up to 128 MiB: one per 32 MiB is generous.
        m.metadataBlocks += Math.ceil(blocks / 8192)
      } else if (s.isSymbolicLink()) {
        if (Buffer.byteLength(await readlink(p)) >= INLINE_SYMLINK_BYTES) m.metadataBlocks++
      }
    }
  }
  await visitDir(root)
  return m
}
