/**
 * The per-sandbox writable layer: an overlayfs whose lower is the image's
 * read-only root (a layerd FUSE mount) and whose upper lives on a
 * size-limited filesystem of the sandbox's own, so the kernel enforces the
 * disk quota (ENOSPC inside the sandbox, nothing outside).
 *
 * Layout of the sandbox's state directory:
 *
 *   lower   -> <image root>   symlink, so mount options never need escaping
 *   disk.img                  sparse ext4 image (kind 'loop-ext4')
 *   disk/                     the quota'd filesystem: upper/ and work/
 *   rootfs/                   the merged overlay, the sandbox's /
 *
 * Quota kinds (measured in bench/tier-start.ts, see the README/issue note):
 * - 'loop-ext4' (default): a sparse file formatted ext4 (no journal) and
 *   loop-mounted. Exact ENOSPC at the quota, state on disk (survives a
 *   layerd restart, for commit), and a hostile sandbox can at worst damage
 *   its own filesystem.
 * - 'tmpfs': `size=` on a tmpfs. Cheapest, but the quota is RAM: pages are
 *   charged to the writer's memory cgroup and the state is lost on reboot.
 *   Fit for small scratch quotas only.
 * XFS/ext4 project quotas on one node-wide filesystem would be cheaper
 * still, but this kernel has neither CONFIG_XFS_QUOTA nor CONFIG_QFMT_V2.
 *
 * Overlay options for an untrusted upper over an immutable lower:
 * redirect_dir=off and metacopy=off (upper xattrs never redirect lookups
 * elsewhere), index=off, xino=off, nosuid and nodev (setuid bits and device
 * nodes in the image or the upper are inert), volatile (no syncs: a sandbox
 * upper is scratch; after a host crash it is discarded).
 *
 * May import: src/errors.ts, src/native.ts, src/host/, node built-ins.
 */
import { chmod, chown, mkdir, rm, stat, symlink } from 'node:fs/promises'
import { dirname, join, resolve } from 'node:path'
import { UnsupportedError, UsageError, describeError } from '../../errors.js'
import { MS_NOATIME, MS_NODEV, MS_NOSUID, nativeMounts } from '../../native.js'
import { unmountAllUnder } from '../../host/mount-table.js'
import { createSparseFile, emptyExt4Runs } from './ext4-template.js'

export type QuotaKind = 'loop-ext4' | 'tmpfs'

/** ext4 needs a few MiB of metadata; below this a quota makes no sense. */
export const MIN_DISK_BYTES = 16 * 1024 ** 2
/** One inode per 8 KiB of quota: enough for source trees, bounded for inode floods. */
const BYTES_PER_INODE = 8192

export interface SandboxOverlayOptions {
  /** The image's read-only root directory (absolute). */
  lower: string
  /** Directory owned by this sandbox (created if missing). */
  stateDir: string
  /** Writable space in bytes. */
  diskBytes: number
  quota?: QuotaKind
}

export interface SandboxOverlay {
  /** The merged root: the sandbox's `/`. */
  merged: string
  /** The overlay upper dir: the sandbox's changes (whiteouts, opaque dirs), for commit. */
  upperDir: string
  quota: QuotaKind
}

/** Paths of the overlay parts in `stateDir`. Sync. */
export function overlayPaths (stateDir: string): { merged: string, upperDir: string, workDir: string, diskDir: string, diskImage: string, lowerLink: string } {
  const s = resolve(stateDir)
  return {
    merged: join(s, 'rootfs'),
    upperDir: join(s, 'disk', 'upper'),
    workDir: join(s, 'disk', 'work'),
    diskDir: join(s, 'disk'),
    diskImage: join(s, 'disk.img'),
    lowerLink: join(s, 'lower')
  }
}

/** Beside the sandboxes' state directories: the pre-made empty disks (./ext4-template.ts). */
export const DISK_TEMPLATE_DIR = '.disk-templates'

const OVERLAY_FLAGS = 'redirect_dir=off,index=off,metacopy=off,xino=off,volatile'

/**
 * The steps, with relative paths (cwd: stateDir) so mount options need no
 * escaping. File work is done here; no process is spawned (a spawn from the
 * daemon costs a fork of it: the shell script this replaces ran ten), but
 * one mkfs.ext4 per disk shape and home (./ext4-template.ts).
 */
async function setUp (stateDir: string, lower: string, quota: QuotaKind, diskBytes: number, inodes: number): Promise<void> {
  const p = overlayPaths(stateDir)
  // mount(2) from the addon: a spawn of mount(8) forks the caller.
  const sys = nativeMounts()
  await rm(p.lowerLink, { force: true })
  await symlink(lower, p.lowerLink)
  await mkdir(p.diskDir, { recursive: true })
  if (quota === 'loop-ext4') {
    const runs = await emptyExt4Runs(diskBytes, inodes, join(dirname(stateDir), DISK_TEMPLATE_DIR), p.diskImage)
    await (await createSparseFile(p.diskImage, diskBytes)).close()
    // The empty ext4's bytes go through the loop device, not into the file before: see ./ext4-template.ts.
    // noinit_itable: the inode tables lie in holes of a fresh sparse file, so they read as zeros already;
    // without it the kernel's ext4lazyinit thread zeroes them after every mount (32 MiB for a 1 GiB disk).
    // nobarrier: no cache flush of the loop device, which the loop driver turns into an fsync of the disk
    // file; the disk is scratch, as the overlay's `volatile` says, and its pages reach the node's disk by
    // writeback only if the sandbox lives that long.
    sys.mountLoop(p.diskImage, p.diskDir, 'ext4', MS_NOSUID | MS_NODEV | MS_NOATIME, 'noinit_itable,nobarrier', runs)
  } else {
    sys.mount('tmpfs', p.diskDir, 'tmpfs', MS_NOSUID | MS_NODEV, `size=${diskBytes},nr_inodes=${inodes},mode=0755`)
  }
  // The upper's root takes the image root's owner and mode, as the merged root shows them.
  const root = await stat(lower)
  await mkdir(p.upperDir)
  await mkdir(p.workDir)
  await chown(p.upperDir, root.uid, root.gid)
  await chmod(p.upperDir, root.mode & 0o7777)
  await mkdir(p.merged, { recursive: true })
  // Relative paths: the sandbox's own mount table (/proc/mounts) then shows no host path.
  sys.mountAt(stateDir, 'overlay', 'rootfs', 'overlay', MS_NOSUID | MS_NODEV, `lowerdir=lower,upperdir=disk/upper,workdir=disk/work,${OVERLAY_FLAGS}`)
}

/**
 * Create the quota'd disk and mount the overlay. Async. Throws UsageError
 * for a quota below {@link MIN_DISK_BYTES} or a lower that is not a
 * directory, UnsupportedError when a mount step fails (its cause: the HostCommandError);
 * on failure whatever was mounted is unmounted again.
 */
export async function mountSandboxOverlay (opts: SandboxOverlayOptions): Promise<SandboxOverlay> {
  const quota = opts.quota ?? 'loop-ext4'
  if (!Number.isSafeInteger(opts.diskBytes) || opts.diskBytes < MIN_DISK_BYTES) {
    throw new UsageError(`disk quota ${opts.diskBytes} bytes is below the minimum of ${MIN_DISK_BYTES}`)
  }
  const lower = resolve(opts.lower)
  const st = await stat(lower).catch(() => undefined)
  if (st?.isDirectory() !== true) throw new UsageError(`image root ${lower} is not a directory`)
  const p = overlayPaths(opts.stateDir)
  await mkdir(resolve(opts.stateDir), { recursive: true })
  const inodes = Math.max(4096, Math.floor(opts.diskBytes / BYTES_PER_INODE))
  try {
    await setUp(resolve(opts.stateDir), lower, quota, opts.diskBytes, inodes)
  } catch (err) {
    await unmountSandboxOverlay(opts.stateDir).catch(() => {})
    if (err instanceof UnsupportedError) throw err
    throw new UnsupportedError(`Cannot set up the writable layer of ${opts.stateDir}: ${describeError(err)}`, { cause: err })
  }
  return { merged: p.merged, upperDir: p.upperDir, quota }
}

/**
 * Unmount the overlay and its disk (whatever of them is mounted), keeping
 * the files. Idempotent. Async.
 */
export async function unmountSandboxOverlay (stateDir: string): Promise<void> {
  await unmountAllUnder(resolve(stateDir))
}

/**
 * Unmount everything below `stateDir` and delete the directory. Refuses to
 * delete while anything is still mounted below it (rm would reach into the
 * mount). Idempotent. Async; throws UnsupportedError if a mount stays.
 */
export async function removeSandboxOverlay (stateDir: string): Promise<void> {
  const dir = resolve(stateDir)
  // The two mounts set-up makes, overlay first, without reading the mount table, whose size grows with
  // the sandboxes on the node; EINVAL (not mounted) and EBUSY are left to unmountAllUnder.
  const p = overlayPaths(dir)
  const sys = nativeMounts()
  for (const m of [p.merged, p.diskDir]) { try { sys.umount2(m, 0) } catch {} }
  await unmountAllUnder(dir) // whatever else is below (a crash mid-set-up): one table read if nothing is; throws while anything stays
  await rm(dir, { recursive: true, force: true })
}
