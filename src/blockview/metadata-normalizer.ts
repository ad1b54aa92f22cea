/**
 * Makes what mke2fs leaves behind depend on the tree's content only.
 *
 * Inode times:
 * `mkfs.ext4 -d` copies atime and ctime from the source files, and those
 * change whenever a tree is copied or read (ctime cannot even be set from
 * user space). Every in-use inode gets atime = ctime = its mtime (OCI layers
 * carry only mtime, so nothing is lost); crtime is already the pinned
 * E2FSPROGS_FAKE_TIME.
 *
 * Two batched debugfs runs: one `stat` per inode to read the times, then
 * `set_inode_field` for those that differ. About 0.3 s for 8,000 inodes.
 *
 * The superblock's lifetime-writes counter (s_kbytes_written) counts the
 * bytes each e2fsprogs run wrote, which depends on how the source was read
 * (a FUSE mount and a directory differ by megabytes) and on how many inodes
 * needed new times: it is reset last.
 *
 * May import: src/errors.ts, src/host/, node built-ins.
 */
import { BadInputError, UnsupportedError } from '../errors.js'
import { runHost } from '../host/host-command.js'

/** The first non-reserved inode of ext4 (s_first_ino); below it only the root (2) holds tree content. */
const FIRST_ORDINARY_INODE = 11
const ROOT_INODE = 2

interface Time { lo: number, extra: number }

async function debugfs (args: string[], commands: string, env: NodeJS.ProcessEnv): Promise<string> {
  return await runHost('debugfs', [...args, '-f', '-'], { env, input: commands, timeoutMs: Infinity, maxStdoutBytes: Infinity, missing: 'debugfs (e2fsprogs) is not installed' })
}

function parseTimes (block: string): Map<string, Time> {
  const times = new Map<string, Time>()
  for (const m of block.matchAll(/^\s*(atime|ctime|mtime|crtime): 0x([0-9a-f]+)(?::([0-9a-f]+))?/gm)) {
    times.set(m[1]!, { lo: parseInt(m[2]!, 16), extra: parseInt(m[3] ?? '0', 16) })
  }
  return times
}

/**
 * Set atime and ctime to mtime on every in-use inode numbered up to
 * `lastInode` of the ext4 image `image`; resolves with how many inodes changed. Async. `env` must pin
 * E2FSPROGS_FAKE_TIME so debugfs' own superblock write is deterministic.
 * `rootMtimeS`, when given, becomes the root
 * directory's times (the source directory's mtime). Throws
 * UnsupportedError without debugfs, BadInputError when the image cannot be
 * read.
 */
export async function normalizeInodeTimes (image: string, lastInode: number, env: NodeJS.ProcessEnv, rootMtimeS?: number): Promise<number> {
  const stats: string[] = []
  for (let i = ROOT_INODE; i <= lastInode; i++) if (i === ROOT_INODE || i >= FIRST_ORDINARY_INODE) stats.push(`stat <${i}>`)
  let listing: string
  try {
    listing = await debugfs([image], `${stats.join('\n')}\n`, env)
  } catch (err) {
    if (err instanceof UnsupportedError) throw err
    throw new BadInputError(`cannot read inodes of ${image}`, { cause: err })
  }
  const sets: string[] = []
  let changed = 0
  for (const block of listing.split(/^debugfs: stat /m).slice(1)) {
    const ino = /^<(\d+)>/.exec(block)?.[1]
    if (ino === undefined || /^Links: 0\b/m.test(block) || /Type: bad type/.test(block)) continue
    const t = parseTimes(block)
    const isRoot = ino === String(ROOT_INODE) && rootMtimeS !== undefined
    // mke2fs stamps the root with its fake time instead of copying the source directory's.
    const mtime = isRoot ? { lo: rootMtimeS >>> 0, extra: 0 } : t.get('mtime')
    if (mtime === undefined) continue
    const before = sets.length
    for (const field of isRoot ? ['mtime', 'atime', 'ctime'] : ['atime', 'ctime']) {
      const cur = t.get(field)
      if (cur !== undefined && cur.lo === mtime.lo && cur.extra === mtime.extra) continue
      sets.push(`sif <${ino}> ${field} @${mtime.lo}`, `sif <${ino}> ${field}_extra ${mtime.extra}`)
    }
    if (sets.length > before) changed++
  }
  if (sets.length > 0) await debugfs(['-w', image], `${sets.join('\n')}\n`, env)
  return changed
}

/**
 * Set the superblock's lifetime-writes counter to zero (plus what this one
 * deterministic debugfs run writes itself). Async.
 */
export async function clearLifetimeWrites (image: string, env: NodeJS.ProcessEnv): Promise<void> {
  await debugfs(['-w', image], 'ssv kbytes_written 0\n', env)
}
