/**
 * A VM's disks on the host:
 *
 * - QEMU: a qcow2 overlay whose backing is the image's block view (read
 *   only, shared, lazily fetched). Its virtual size is the block view's
 *   filesystem plus whatever the disk quota asks beyond the free space the
 *   block view already has; the guest grows its root filesystem to fill it
 *   (layerd-agent --resize), so it sees ENOSPC when the quota is used, and
 *   the overlay file can never grow past the virtual size (plus qcow2
 *   metadata).
 * - Firecracker (raw drives only): the block view read-only, plus a sparse
 *   scratch ext4 of exactly the quota for the guest's overlayfs upper.
 *
 * May import: src/errors.ts, src/host/, src/format/ext4-superblock.ts, node built-ins.
 */
import { open, rm, stat, truncate, writeFile } from 'node:fs/promises'
import { runHost } from '../../host/host-command.js'
import { decodeExt4Superblock, type Ext4Superblock } from '../../format/ext4-superblock.js'

const ALIGN_BYTES = 1024 * 1024

/** The block view's ext4 superblock: one 2 KiB read (through FUSE: one chunk). Async. */
export async function readSuperblock (blockView: string): Promise<Ext4Superblock> {
  const fh = await open(blockView, 'r')
  try {
    const buf = Buffer.alloc(2048)
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0)
    return decodeExt4Superblock(buf.subarray(0, bytesRead), blockView)
  } finally {
    await fh.close()
  }
}

export interface OverlayPlan {
  /** Virtual size of the overlay: what the guest sees as its disk. */
  virtualBytes: number
  /** Free bytes in the guest's root once it has grown into the disk (before filesystem metadata of the new space). */
  guestFreeBytes: number
}

/**
 * Overlay size for a quota. Pure. The filesystem grows by whole block
 * groups' worth of metadata too (bitmaps and an inode table per group), so
 * that is added on top: what the guest can then write is the quota.
 */
export function planOverlay (sb: Ext4Superblock, rawFileBytes: number, diskBytes: number): OverlayPlan {
  const want = Math.max(0, diskBytes - sb.freeBytes)
  const groupBytes = sb.blocksPerGroup * sb.blockSize
  const perGroupOverhead = sb.inodesPerGroup * sb.inodeSize + 2 * sb.blockSize
  const grow = want === 0 ? 0 : want + Math.ceil(want / Math.max(1, groupBytes - perGroupOverhead)) * perGroupOverhead
  const virtualBytes = Math.ceil(Math.max(rawFileBytes, sb.sizeBytes + grow) / ALIGN_BYTES) * ALIGN_BYTES
  const added = virtualBytes - sb.sizeBytes
  const overhead = added === 0 ? 0 : Math.ceil(added / groupBytes) * perGroupOverhead
  return { virtualBytes, guestFreeBytes: sb.freeBytes + added - overhead }
}

/** Rejects with UnsupportedError when `cmd` is missing, HostCommandError (a CommandFailedError) when it fails. */
async function tool (cmd: string, args: string[]): Promise<void> {
  await runHost(cmd, args, { timeoutMs: Infinity, missing: `${cmd} is not installed; run .ci/setup (apt)` })
}

/**
 * Create the qcow2 overlay `overlay` over `blockView` for a `diskBytes`
 * quota. Async. Does not read the block view beyond its superblock
 * (`qemu-img create -u`).
 */
export async function createOverlay (blockView: string, overlay: string, diskBytes: number): Promise<OverlayPlan & { superblock: Ext4Superblock }> {
  const sb = await readSuperblock(blockView)
  const plan = planOverlay(sb, (await stat(blockView)).size, diskBytes)
  await rm(overlay, { force: true })
  await tool('qemu-img', ['create', '-q', '-u', '-f', 'qcow2', '-F', 'raw', '-b', blockView, overlay, String(plan.virtualBytes)])
  return { ...plan, superblock: sb }
}

/** A sparse ext4 of exactly `bytes` for Firecracker's overlayfs upper. Async. */
export async function createScratchDisk (path: string, bytes: number): Promise<void> {
  await rm(path, { force: true })
  await writeFile(path, '')
  await truncate(path, Math.ceil(bytes / ALIGN_BYTES) * ALIGN_BYTES)
  await tool('mkfs.ext4', ['-q', '-F', '-m', '0', '-O', '^has_journal', '-E', 'assume_storage_prezeroed=1,root_owner=0:0', '-L', 'layerd-scratch', path])
}
