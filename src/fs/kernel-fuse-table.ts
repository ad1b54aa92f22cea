/**
 * The metadata table of one mount for the kernel-protocol FUSE server
 * (native/fuse_server.c): every attribute, directory listing, symlink
 * target and xattr of a merged image, in one immutable little-endian
 * buffer the server answers LOOKUP, GETATTR, READDIR(PLUS), READLINK,
 * GETXATTR, LISTXATTR and STATFS from, without calling into JS.
 *
 * FUSE node ids are the merged tree's inode numbers (root = 1 =
 * FUSE_ROOT_ID; hardlinks share one), and st_ino is the same number.
 * Layout (sizes in bytes):
 *
 *   header   48: magic "LDFT", version 1, nodeCount, direntCount, xattrCount,
 *                stringsBytes, flags (1 = has xattrs), pad, statfs blocks (u64), files (u64)
 *   nodes    72 × (nodeCount + 1), index 0 unused:
 *                ino, size, blocks (u64), mtime (i64, seconds),
 *                mode, nlink, uid, gid, rdev, parent, first, count, xattrFirst, xattrCount (u32)
 *                dirs: first/count = their entries; symlinks: first/count = target in strings
 *   dirents  12 × direntCount: nodeid, nameOffset (u32), nameLen (u16), d_type (u8), pad
 *                each directory's entries contiguous and sorted by name bytes
 *   xattrs   16 × xattrCount: nameOffset, nameLen, valueOffset, valueLen (u32), sorted by name
 *   strings  names, targets, xattr names and values
 *
 * Attribute rules are ImageView's (directories 4096 bytes, symlinks the
 * length of their target, atime = ctime = mtime), except that times before
 * 1970 are carried as they are (the kernel protocol can; fuse-native
 * cannot).
 *
 * May import: src/format/, ./image-view.ts.
 */
import type { MergedInode, MergedNode } from '../format/merge.js'
import { DIR_SIZE, MAX_NAME_BYTES, STAT_BLOCK_BYTES, TYPE_BITS, makedev, sortedChildren, type ImageView } from './image-view.js'

const MAGIC = 0x5446444c
const VERSION = 1
const HEADER_BYTES = 48
const NODE_BYTES = 72
const DIRENT_BYTES = 12
const XATTR_BYTES = 16
const FLAG_HAS_XATTRS = 1

export interface KernelFuseTable {
  bytes: Buffer
  /** Inodes by node id (index 0 unused); undefined for inodes the tree does not reach. */
  inodes: Array<MergedInode | undefined>
  /** The path of a node id, for messages. */
  pathOf: (nodeid: number) => string
}

const TWO_32 = 2 ** 32

/** A safe integer ≥ 0 as u64 LE, without BigInt. */
function writeU64 (b: Buffer, v: number, at: number): void {
  b.writeUInt32LE(v % TWO_32, at)
  b.writeUInt32LE(Math.floor(v / TWO_32), at + 4)
}

/** A safe integer as i64 LE (two's complement), without BigInt. */
function writeI64 (b: Buffer, v: number, at: number): void {
  const lo = ((v % TWO_32) + TWO_32) % TWO_32
  b.writeUInt32LE(lo, at)
  b.writeInt32LE(Math.floor((v - lo) / TWO_32), at + 4)
}

interface DirInfo { node: MergedNode, parent: number, kids: MergedNode[], names: Buffer[] }

/** Encode `view`'s tree (statfs figures from the view). Sync; O(entries · log entries) for the sorted listings. Throws RangeError for a name longer than 255 bytes. */
export function encodeKernelFuseTable (view: ImageView): KernelFuseTable {
  const tree = view.tree
  const nodeCount = tree.inodes.length - 1
  const reachable: Array<MergedInode | undefined> = new Array(nodeCount + 1)
  const dirs: Array<DirInfo | undefined> = new Array(nodeCount + 1)
  const names: Array<string | undefined> = new Array(nodeCount + 1)
  const parents = new Uint32Array(nodeCount + 1)
  const strings: Buffer[] = []
  let stringsBytes = 0
  const addString = (b: Buffer): number => { const at = stringsBytes; strings.push(b); stringsBytes += b.length; return at }

  // Walk from the root: directories, their parents and sorted entries.
  let direntCount = 0
  const stack: Array<[MergedNode, number]> = [[tree.root, tree.root.inode.ino]]
  while (stack.length > 0) {
    const [node, parent] = stack.pop()!
    const ino = node.inode.ino
    if (reachable[ino] !== undefined) continue
    reachable[ino] = node.inode
    names[ino] = node.name
    parents[ino] = parent
    if (node.children === undefined) continue
    const { nodes: kids, names: kidNames } = sortedChildren(node.children)
    for (const b of kidNames) if (b.length > MAX_NAME_BYTES) throw new RangeError(`name longer than ${MAX_NAME_BYTES} bytes below inode ${ino}`)
    dirs[ino] = { node, parent, kids, names: kidNames }
    direntCount += kids.length
    for (const k of kids) stack.push([k, ino])
  }

  let xattrCount = 0
  for (let i = 1; i <= nodeCount; i++) {
    const x = reachable[i]?.entry.xattrs
    if (x !== undefined) xattrCount += Object.keys(x).length
  }

  const nodes = Buffer.alloc(NODE_BYTES * (nodeCount + 1))
  const dirents = Buffer.alloc(DIRENT_BYTES * direntCount)
  const xattrs = Buffer.alloc(XATTR_BYTES * xattrCount)
  let dirent = 0
  let xattr = 0
  for (let ino = 1; ino <= nodeCount; ino++) {
    const inode = reachable[ino]
    if (inode === undefined) continue
    const e = inode.entry
    const at = ino * NODE_BYTES
    let first = 0
    let count = 0
    let size = e.size
    if (e.type === 'dir') {
      size = DIR_SIZE
      const d = dirs[ino]!
      first = dirent
      count = d.kids.length
      for (let k = 0; k < d.kids.length; k++) {
        const kid = d.kids[k]!
        const o = dirent * DIRENT_BYTES
        dirents.writeUInt32LE(kid.inode.ino, o)
        dirents.writeUInt32LE(addString(d.names[k]!), o + 4)
        dirents.writeUInt16LE(d.names[k]!.length, o + 8)
        dirents.writeUInt8(((TYPE_BITS[kid.inode.entry.type] ?? 0) >>> 12) & 0xf, o + 10)
        dirent++
      }
    } else if (e.type === 'symlink') {
      const target = Buffer.from(e.target ?? '')
      size = target.length
      first = addString(target)
      count = target.length
    }
    let xattrFirst = 0
    let xattrsHere = 0
    if (e.xattrs !== undefined) {
      xattrFirst = xattr
      for (const name of Object.keys(e.xattrs).sort()) {
        const nameBytes = Buffer.from(name)
        const value = Buffer.from(e.xattrs[name]!, 'base64')
        const o = xattr * XATTR_BYTES
        xattrs.writeUInt32LE(addString(nameBytes), o)
        xattrs.writeUInt32LE(nameBytes.length, o + 4)
        xattrs.writeUInt32LE(addString(value), o + 8)
        xattrs.writeUInt32LE(value.length, o + 12)
        xattr++
        xattrsHere++
      }
    }
    writeU64(nodes, ino, at)
    writeU64(nodes, size, at + 8)
    writeU64(nodes, e.type === 'symlink' ? 0 : Math.ceil(size / STAT_BLOCK_BYTES), at + 16)
    writeI64(nodes, Math.floor(e.mtime), at + 24)
    nodes.writeUInt32LE((TYPE_BITS[e.type] ?? 0) | e.mode, at + 32)
    nodes.writeUInt32LE(inode.nlink, at + 36)
    nodes.writeUInt32LE(e.uid, at + 40)
    nodes.writeUInt32LE(e.gid, at + 44)
    nodes.writeUInt32LE(e.type === 'char' || e.type === 'block' ? makedev(e.devMajor ?? 0, e.devMinor ?? 0) : 0, at + 48)
    nodes.writeUInt32LE(parents[ino]!, at + 52)
    nodes.writeUInt32LE(first, at + 56)
    nodes.writeUInt32LE(count, at + 60)
    nodes.writeUInt32LE(xattrFirst, at + 64)
    nodes.writeUInt32LE(xattrsHere, at + 68)
  }

  const header = Buffer.alloc(HEADER_BYTES)
  header.writeUInt32LE(MAGIC, 0)
  header.writeUInt32LE(VERSION, 4)
  header.writeUInt32LE(nodeCount, 8)
  header.writeUInt32LE(direntCount, 12)
  header.writeUInt32LE(xattrCount, 16)
  header.writeUInt32LE(stringsBytes, 20)
  header.writeUInt32LE(xattrCount > 0 ? FLAG_HAS_XATTRS : 0, 24)
  const statfs = view.statfs()
  writeU64(header, statfs.blocks, 32)
  writeU64(header, statfs.files, 40)

  const pathOf = (nodeid: number): string => {
    const parts: string[] = []
    for (let at = nodeid, hops = 0; at !== tree.root.inode.ino && hops < 4096; at = parents[at] ?? tree.root.inode.ino, hops++) {
      const name = names[at]
      if (name === undefined) return `<inode ${nodeid}>`
      parts.push(name)
    }
    return '/' + parts.reverse().join('/')
  }
  return { bytes: Buffer.concat([header, nodes, dirents, xattrs, ...strings]), inodes: reachable, pathOf }
}
