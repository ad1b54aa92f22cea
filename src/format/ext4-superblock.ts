/**
 * Reads the facts layerd needs from an ext4 superblock (the 1 KiB at byte
 * 1024 of a block view): size, free space, inode counts, UUID, features.
 * The VM tiers use it to size a VM's copy-on-write disk without reading
 * more than one block of a lazily fetched block view.
 *
 * Pure: no fs, network or native code.
 */
import { BadInputError } from '../errors.js'

export const SUPERBLOCK_OFFSET = 1024
export const SUPERBLOCK_BYTES = 1024
const EXT4_MAGIC = 0xef53
const INCOMPAT_64BIT = 0x80

export interface Ext4Superblock {
  blockSize: number
  blocksCount: number
  freeBlocks: number
  inodesCount: number
  freeInodes: number
  inodeSize: number
  blocksPerGroup: number
  inodesPerGroup: number
  /** UUID as 8-4-4-4-12 hex. */
  uuid: string
  volumeName: string
  /** Filesystem size in bytes (blocksCount × blockSize). */
  sizeBytes: number
  freeBytes: number
  hasJournal: boolean
}

function formatUuid (b: Buffer): string {
  const h = b.toString('hex')
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

/**
 * Decode the superblock from `bytes`, which hold the device from offset 0
 * (at least 2048 bytes) or the superblock alone (exactly 1024). Sync.
 * Throws BadInputError when the magic number is not ext2/3/4's.
 */
export function decodeExt4Superblock (bytes: Uint8Array, source: string): Ext4Superblock {
  const all = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const sb = all.length === SUPERBLOCK_BYTES ? all : all.subarray(SUPERBLOCK_OFFSET, SUPERBLOCK_OFFSET + SUPERBLOCK_BYTES)
  if (sb.length < SUPERBLOCK_BYTES || sb.readUInt16LE(0x38) !== EXT4_MAGIC) throw new BadInputError(`${source} is not an ext2/3/4 filesystem (no superblock magic)`)
  const is64 = (sb.readUInt32LE(0x60) & INCOMPAT_64BIT) !== 0
  const blockSize = 1024 << sb.readUInt32LE(0x18)
  const blocksCount = sb.readUInt32LE(0x04) + (is64 ? sb.readUInt32LE(0x150) * 2 ** 32 : 0)
  const freeBlocks = sb.readUInt32LE(0x0c) + (is64 ? sb.readUInt32LE(0x158) * 2 ** 32 : 0)
  const nameEnd = sb.indexOf(0, 0x78)
  return {
    blockSize,
    blocksCount,
    freeBlocks,
    inodesCount: sb.readUInt32LE(0x00),
    freeInodes: sb.readUInt32LE(0x10),
    inodeSize: sb.readUInt16LE(0x58),
    blocksPerGroup: sb.readUInt32LE(0x20),
    inodesPerGroup: sb.readUInt32LE(0x28),
    uuid: formatUuid(sb.subarray(0x68, 0x78)),
    volumeName: sb.toString('latin1', 0x78, nameEnd < 0 || nameEnd > 0x88 ? 0x88 : nameEnd),
    sizeBytes: blocksCount * blockSize,
    freeBytes: freeBlocks * blockSize,
    hasJournal: (sb.readUInt32LE(0x5c) & 0x4) !== 0
  }
}
