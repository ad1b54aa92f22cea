/**
 * The block view of an image: its merged root filesystem as a deterministic
 * raw ext4 file, which the microvm and vm tiers boot from (behind a per-VM
 * qcow2 overlay) and which is chunked into the store like any layer.
 *
 * Determinism (same tree → same bytes, on any host):
 * - mke2fs reads a config written here (MKE2FS_CONFIG), never the host's
 *   /etc/mke2fs.conf: block size, inode size, features and hash algorithm
 *   are pinned; no journal (the VM's writes are thrown away with its
 *   overlay, and a journal would be 16+ MiB of content for nothing).
 * - UUID and directory hash seed derive from `uuidSeed` (e.g. the image's
 *   manifest digest); E2FSPROGS_FAKE_TIME pins every "now"; LC_ALL=C pins
 *   the order `mke2fs -d` adds directory entries in (scandir + alphasort),
 *   so inode numbers do not depend on the source's readdir order.
 * - The size and inode count are computed from the tree's content
 *   (tree-measure.ts), not from the source filesystem's allocation; a
 *   second mkfs pass at the first pass's usage + headroom leaves the
 *   filesystem nearly full (the VMs grow it to their quota).
 * - atime/ctime, which mke2fs copies from the source, are reset to mtime,
 *   and the superblock's lifetime-writes counter is cleared
 *   (metadata-normalizer.ts).
 * - `assume_storage_prezeroed` keeps never-written blocks as holes: the
 *   file is sparse, so headroom costs neither disk nor (chunked: one zero
 *   chunk, deduplicated) store space.
 *
 * `mke2fs -d` keeps ownership, modes (setuid/setgid/sticky), xattrs
 * (security.capability included), hardlinks, device nodes, fifos,
 * symlinks, mtimes and holes; the tests check that through a loop mount.
 *
 * May import: src/errors.ts, src/format/, src/host/, this folder, node built-ins.
 */
import { createHash } from 'node:crypto'
import { lstat, mkdtemp, open, rm, truncate, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { CommandFailedError, LimitExceededError } from '../errors.js'
import { collectHost } from '../host/host-command.js'
import { decodeExt4Superblock, type Ext4Superblock } from '../format/ext4-superblock.js'
import { clearLifetimeWrites, normalizeInodeTimes } from './metadata-normalizer.js'
import { BLOCK_BYTES, measureTree, type TreeMeasure } from './tree-measure.js'

/**
 * Free space left in the filesystem by default: little, on purpose. A block
 * view is shared by every sandbox of the image whatever its quota; each VM
 * grows the filesystem online to its own quota at boot (the qcow2 overlay
 * is that much bigger), so the quota is exact instead of "at least the
 * block view's free space".
 */
export const DEFAULT_HEADROOM_BYTES = 4 * 1024 * 1024
/** Added to the first pass's usage when sizing the second: mkfs' own rounding. */
const TIGHT_SLACK_BYTES = 2 * 1024 * 1024
/** Every timestamp mke2fs makes up itself (mkfs time, root, lost+found). */
export const BLOCK_VIEW_EPOCH_S = 1
export const BLOCK_VIEW_LABEL = 'layerd'
const INODE_BYTES = 256
/** Bytes of headroom per spare inode (mke2fs' own default ratio). */
const HEADROOM_BYTES_PER_INODE = 16384
const MIN_SPARE_INODES = 1024
const SIZE_SLACK = 1.03
const FIXED_OVERHEAD_BYTES = 8 * 1024 * 1024
const SIZE_ALIGN_BYTES = 1024 * 1024
const MAX_ATTEMPTS = 4

/** The whole mke2fs configuration: nothing comes from the host's /etc/mke2fs.conf. */
const MKE2FS_CONF = `[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = ${BLOCK_BYTES}
	inode_size = ${INODE_BYTES}
	inode_ratio = ${HEADROOM_BYTES_PER_INODE}
	reserved_ratio = 0
	hash_alg = half_md4
	lazy_itable_init = 1
[fs_types]
	ext4 = {
		features = extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize
	}
`

export interface BlockViewOptions {
  /** Seed of the filesystem UUID and directory hash seed: the image's manifest digest, say. */
  uuidSeed: string
  /** Where to write the raw file. Default: a new file in a fresh directory under the OS temp dir. */
  out?: string
  /** Exact filesystem size in bytes (a multiple of 4096). Default: what the tree needs + `headroomBytes` (two mkfs passes: the second at the first one's usage). */
  sizeBytes?: number
  /** Free space beyond the content when `sizeBytes` is not given. Default {@link DEFAULT_HEADROOM_BYTES}. */
  headroomBytes?: number
}

export interface BuiltBlockView {
  /** The raw ext4 file (sparse). */
  path: string
  sizeBytes: number
  /** Free space in the filesystem (as root: no reserved blocks). */
  freeBytes: number
  uuid: string
  inodes: number
  tree: TreeMeasure
}

/** A deterministic RFC 4122 version-4-shaped UUID from `seed` and a purpose label. */
export function derivedUuid (seed: string, purpose: string): string {
  const b = createHash('sha256').update(`layerd block view ${purpose}\0${seed}`).digest().subarray(0, 16)
  b[6] = (b[6]! & 0x0f) | 0x40
  b[8] = (b[8]! & 0x3f) | 0x80
  const h = b.toString('hex')
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

/** Filesystem bytes and inode count for a measured tree plus headroom. Pure. */
export function planFilesystem (tree: TreeMeasure, headroomBytes: number): { sizeBytes: number, inodes: number } {
  const inodes = Math.ceil((tree.inodes + Math.max(MIN_SPARE_INODES, Math.ceil(headroomBytes / HEADROOM_BYTES_PER_INODE))) * 1.1)
  const contentBytes = (tree.dataBlocks + tree.metadataBlocks) * BLOCK_BYTES
  const raw = contentBytes * SIZE_SLACK + inodes * INODE_BYTES + FIXED_OVERHEAD_BYTES + headroomBytes
  return { sizeBytes: Math.ceil(raw / SIZE_ALIGN_BYTES) * SIZE_ALIGN_BYTES, inodes }
}

async function mke2fs (args: string[], env: NodeJS.ProcessEnv): Promise<{ ok: boolean, noSpace: boolean, stderr: string }> {
  const r = await collectHost('mkfs.ext4', args, { env, timeoutMs: Infinity, missing: 'mkfs.ext4 (e2fsprogs) is not installed' })
  return { ok: r.code === 0, noSpace: /Could not allocate|No space left|allocating inode|block bitmap/i.test(r.stderr), stderr: r.stderr }
}

/** The superblock of the ext4 file at `path`. Async. */
export async function readBlockViewSuperblock (path: string): Promise<Ext4Superblock> {
  const fh = await open(path, 'r')
  try {
    const buf = Buffer.alloc(2048)
    await fh.read(buf, 0, buf.length, 0)
    return decodeExt4Superblock(buf, path)
  } finally {
    await fh.close()
  }
}

/**
 * Build the block view of the merged tree at `mergedDir`. Async; about 1-2 s
 * for a 165 MB Debian tree. Throws NotFoundError when `mergedDir` is not a
 * directory, LimitExceededError when a given `sizeBytes` is too small,
 * UnsupportedError without e2fsprogs, CommandFailedError naming mke2fs' complaint otherwise.
 */
export async function buildBlockView (mergedDir: string, opts: BlockViewOptions): Promise<BuiltBlockView> {
  const tree = await measureTree(mergedDir)
  const rootStat = await lstat(mergedDir)
  const headroom = opts.headroomBytes ?? DEFAULT_HEADROOM_BYTES
  const plan = planFilesystem(tree, headroom)
  const out = opts.out ?? join(await mkdtemp(join(tmpdir(), 'layerd-blockview-')), 'disk.raw')
  const work = await mkdtemp(join(dirname(out), '.mke2fs-'))
  const conf = join(work, 'mke2fs.conf')
  await writeFile(conf, MKE2FS_CONF)
  const env: NodeJS.ProcessEnv = { ...process.env, MKE2FS_CONFIG: conf, E2FSPROGS_FAKE_TIME: String(BLOCK_VIEW_EPOCH_S), LC_ALL: 'C', LANG: 'C' }
  const mkfs = async (sizeBytes: number): Promise<Awaited<ReturnType<typeof mke2fs>>> => {
    await rm(out, { force: true })
    await writeFile(out, '')
    await truncate(out, sizeBytes)
    return await mke2fs(['-q', '-F', '-t', 'ext4', '-b', String(BLOCK_BYTES), '-I', String(INODE_BYTES), '-N', String(plan.inodes),
      '-m', '0', '-L', BLOCK_VIEW_LABEL, '-U', derivedUuid(opts.uuidSeed, 'uuid'),
      '-E', `hash_seed=${derivedUuid(opts.uuidSeed, 'hash seed')},root_owner=${rootStat.uid}:${rootStat.gid},assume_storage_prezeroed=1,nodiscard`,
      '-d', mergedDir, out], env)
  }
  try {
    let sizeBytes = opts.sizeBytes ?? plan.sizeBytes
    for (let attempt = 1; ; attempt++) {
      const r = await mkfs(sizeBytes)
      if (r.ok) break
      if (!r.noSpace) throw new CommandFailedError(`mkfs.ext4 -d ${mergedDir} ${out} failed: ${r.stderr}`)
      if (opts.sizeBytes !== undefined) throw new LimitExceededError(`tree ${mergedDir} does not fit a ${opts.sizeBytes}-byte block view: ${r.stderr.split('\n').pop() ?? ''}`)
      if (attempt >= MAX_ATTEMPTS) throw new CommandFailedError(`tree ${mergedDir} still does not fit a ${sizeBytes}-byte block view after ${attempt} attempts: ${r.stderr}`)
      // Deterministic retry: the next size depends only on the previous one.
      sizeBytes = Math.ceil(sizeBytes * 1.25 / SIZE_ALIGN_BYTES) * SIZE_ALIGN_BYTES
    }
    if (opts.sizeBytes === undefined) {
      // Second pass at what the first one used plus the headroom: the free space is then close to
      // `headroom`, and VMs get their quota by growing the filesystem, not from the block view.
      const first = await readBlockViewSuperblock(out)
      const tight = Math.ceil(((first.blocksCount - first.freeBlocks) * first.blockSize + headroom + TIGHT_SLACK_BYTES) / SIZE_ALIGN_BYTES) * SIZE_ALIGN_BYTES
      if (tight < sizeBytes) {
        const r = await mkfs(tight)
        if (!r.ok && !r.noSpace) throw new CommandFailedError(`mkfs.ext4 -d ${mergedDir} ${out} failed: ${r.stderr}`)
        if (!r.ok) await mkfs(sizeBytes) // deterministic fallback: the first pass's size
      }
    }
    const sb = await readBlockViewSuperblock(out)
    await normalizeInodeTimes(out, sb.inodesCount - sb.freeInodes, env, Math.floor(rootStat.mtimeMs / 1000))
    await clearLifetimeWrites(out, env)
    const final = await readBlockViewSuperblock(out)
    return { path: out, sizeBytes: final.sizeBytes, freeBytes: final.freeBytes, uuid: final.uuid, inodes: final.inodesCount, tree }
  } catch (err) {
    await rm(out, { force: true })
    throw err
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}
