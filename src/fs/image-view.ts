/**
 * ImageView: the metadata side of a mounted image. An inode table over a
 * merged layer tree, answering what FUSE asks (attributes, lookups,
 * listings, link targets, xattrs, statfs) from memory, synchronously.
 *
 * The binding's API is path-based. Directory paths are resolved once and
 * kept in a Map, so any path costs at most two Map lookups (its directory,
 * then the name); everything after that is by inode.
 *
 * Memory: a node holds many mounts of images that share most of their
 * files, so per-mount state is kept to what cannot be derived cheaply.
 * Attributes are built on each getattr/readdir from the shared TOC entry
 * (a dozen fields; the binding itself allocates an array per answer, and
 * the kernel caches attributes for a day, so an entry is rarely asked
 * twice); only the sorted child order of listed directories, the directory
 * path map and decoded xattrs are cached. Caching stats, file paths and
 * listings per inode cost ~3 MB per mount of a Debian + python image after
 * one `find -ls` (bench/daemon-memory.ts; src/fs/README.md).
 *
 * Attribute choices: inode numbers are MergedInode.ino (stable for the same
 * TOCs); hardlinks share one inode and report its link count; atime and
 * ctime equal mtime; negative mtimes (before 1970) read as 0, because the
 * binding cannot carry them; directories report size 4096; symlinks report
 * the byte length of their target.
 *
 * May import: src/errors.ts, src/format/, ./fuse-binding.ts (types only).
 */
import { constants as fsConstants } from 'node:fs'
import { NotFoundError } from '../errors.js'
import type { MergedInode, MergedNode, MergedTree } from '../format/merge.js'
import type { EntryType } from '../format/toc.js'
import type { FuseStat, FuseStatfs } from './fuse-binding.js'

export const BLOCK_SIZE = 4096
export const DIR_SIZE = 4096
export const STAT_BLOCK_BYTES = 512
export const MAX_NAME_BYTES = 255
const ST_RDONLY = 1

/** st_mode type bits per TOC entry type (whiteouts and opaque markers never reach a view). */
export const TYPE_BITS: Record<EntryType, number> = {
  file: fsConstants.S_IFREG,
  hardlink: fsConstants.S_IFREG,
  dir: fsConstants.S_IFDIR,
  symlink: fsConstants.S_IFLNK,
  char: fsConstants.S_IFCHR,
  block: fsConstants.S_IFBLK,
  fifo: fsConstants.S_IFIFO,
  whiteout: 0,
  opaque: 0
}

/** A directory's entries for readdir, `.` and `..` first, then by name (byte order). Built per call. */
export interface DirListing {
  names: string[]
  stats: FuseStat[]
}

/** Linux `makedev`, the 32-bit form FUSE carries (major < 4096, minor < 2^20). */
export function makedev (major: number, minor: number): number {
  return (((major & 0xfff) << 8) | (minor & 0xff) | ((minor & 0xfff00) << 12)) >>> 0
}

/** A directory's children in listing order (name bytes), with their names as bytes. Sync. */
export function sortedChildren (children: Map<string, MergedNode>): { nodes: MergedNode[], names: Buffer[] } {
  const keyed = [...children.values()].map(node => ({ node, name: Buffer.from(node.name) }))
  keyed.sort((a, b) => Buffer.compare(a.name, b.name))
  return { nodes: keyed.map(k => k.node), names: keyed.map(k => k.name) }
}

export class ImageView {
  readonly tree: MergedTree
  /** Bytes of regular-file content, each inode once. */
  readonly imageBytes: number
  /** Inodes reachable from the root. */
  readonly inodeCount: number
  /** Whether any reachable inode has an extended attribute. */
  readonly hasXattrs: boolean
  /** Directories by FUSE path, filled as paths are resolved. */
  readonly #dirsByPath = new Map<string, MergedNode>()
  /** Reachable inodes by number. */
  readonly #inodes: Array<MergedInode | undefined> = []
  /** Directory nodes and their parents, by inode number. */
  readonly #dirNodes: Array<MergedNode | undefined> = []
  readonly #dirParents: Array<MergedNode | undefined> = []
  /** Children in listing order, by directory inode; filled on first readdir. */
  readonly #sortedChildren: Array<MergedNode[] | undefined> = []
  readonly #xattrs: Array<Map<string, Buffer> | undefined> = []
  readonly #statfs: FuseStatfs

  /** Index `tree`. Sync; O(entries). */
  constructor (tree: MergedTree) {
    this.tree = tree
    let imageBytes = 0
    let hasXattrs = false
    const seen = new Set<number>()
    const stack: MergedNode[] = [tree.root]
    this.#dirParents[tree.root.inode.ino] = tree.root
    while (stack.length > 0) {
      const node = stack.pop()!
      const ino = node.inode.ino
      if (!seen.has(ino)) {
        seen.add(ino)
        this.#inodes[ino] = node.inode
        imageBytes += node.inode.entry.size
        if (node.inode.entry.xattrs !== undefined && Object.keys(node.inode.entry.xattrs).length > 0) hasXattrs = true
      }
      if (node.children === undefined) continue
      this.#dirNodes[ino] = node
      for (const child of node.children.values()) {
        if (child.children !== undefined) this.#dirParents[child.inode.ino] = node
        stack.push(child)
      }
    }
    this.imageBytes = imageBytes
    this.hasXattrs = hasXattrs
    this.inodeCount = seen.size
    this.#dirsByPath.set('/', tree.root)
    const blocks = Math.ceil(imageBytes / BLOCK_SIZE)
    this.#statfs = {
      bsize: BLOCK_SIZE, frsize: BLOCK_SIZE, blocks, bfree: 0, bavail: 0,
      files: this.inodeCount, ffree: 0, favail: 0, fsid: 0, flag: ST_RDONLY, namemax: MAX_NAME_BYTES
    }
  }

  /**
   * The node at a FUSE path (`/`, `/usr/bin`), or undefined. Sync. A
   * directory path is resolved once, then answered from a Map; any other
   * path is its directory's lookup plus one child lookup.
   */
  nodeAt (path: string): MergedNode | undefined {
    const dir = this.#dirsByPath.get(path)
    if (dir !== undefined) return dir
    const slash = path.lastIndexOf('/')
    if (slash < 0) return undefined
    const parent = slash === 0 ? this.tree.root : this.nodeAt(path.slice(0, slash))
    const node = parent?.children?.get(path.slice(slash + 1))
    if (node?.children !== undefined) this.#dirsByPath.set(path, node)
    return node
  }

  /** The node at `path`; throws NotFoundError. Sync. */
  requireNode (path: string): MergedNode {
    const node = this.nodeAt(path)
    if (node === undefined) throw new NotFoundError(`no entry ${JSON.stringify(path)} in the image`)
    return node
  }

  /** The reachable inode numbered `ino`, or undefined. Sync. */
  inode (ino: number): MergedInode | undefined {
    return this.#inodes[ino]
  }

  /** The child `name` of directory inode `parentIno`, or undefined. Sync. */
  lookup (parentIno: number, name: string): MergedNode | undefined {
    return this.#dirNodes[parentIno]?.children?.get(name)
  }

  /** Attributes of `inode`. Sync; a fresh object owned by the caller. */
  getattr (inode: MergedInode): FuseStat {
    const e = inode.entry
    const size = e.type === 'dir' ? DIR_SIZE : e.type === 'symlink' ? Buffer.byteLength(e.target ?? '') : e.size
    const timeMs = Math.max(0, e.mtime) * 1000
    return {
      mode: TYPE_BITS[e.type] | e.mode,
      uid: e.uid,
      gid: e.gid,
      size,
      nlink: inode.nlink,
      ino: inode.ino,
      rdev: e.type === 'char' || e.type === 'block' ? makedev(e.devMajor ?? 0, e.devMinor ?? 0) : 0,
      blksize: BLOCK_SIZE,
      blocks: e.type === 'symlink' ? 0 : Math.ceil(size / STAT_BLOCK_BYTES),
      atime: timeMs,
      mtime: timeMs,
      ctime: timeMs
    }
  }

  /** Listing of directory inode `ino`, or undefined when it is not a directory. Sync; built per call (the order is cached). */
  readdir (ino: number): DirListing | undefined {
    const dir = this.#dirNodes[ino]
    if (dir?.children === undefined) return undefined
    const kids = this.#sortedChildren[ino] ?? this.#sortChildren(ino, dir.children)
    const parent = this.#dirParents[ino] ?? dir
    const names = new Array<string>(kids.length + 2)
    const stats = new Array<FuseStat>(kids.length + 2)
    names[0] = '.'
    names[1] = '..'
    stats[0] = this.getattr(dir.inode)
    stats[1] = this.getattr(parent.inode)
    for (let i = 0; i < kids.length; i++) {
      names[i + 2] = kids[i]!.name
      stats[i + 2] = this.getattr(kids[i]!.inode)
    }
    return { names, stats }
  }

  /** Target of a symlink inode, or undefined for other types. Sync. */
  readlink (inode: MergedInode): string | undefined {
    return inode.entry.type === 'symlink' ? inode.entry.target : undefined
  }

  /** Value of xattr `name`, or undefined. Sync; the buffer is shared: do not mutate. */
  getxattr (inode: MergedInode, name: string): Buffer | undefined {
    return this.#xattrsOf(inode)?.get(name)
  }

  /** Names of the xattrs of `inode`, sorted. Sync. */
  listxattr (inode: MergedInode): string[] {
    const map = this.#xattrsOf(inode)
    return map === undefined ? [] : [...map.keys()]
  }

  /** Filesystem figures: size = image bytes, nothing free, read-only. Sync; shared object. */
  statfs (): FuseStatfs {
    return this.#statfs
  }

  #sortChildren (ino: number, children: Map<string, MergedNode>): MergedNode[] {
    const sorted = sortedChildren(children).nodes
    this.#sortedChildren[ino] = sorted
    return sorted
  }

  #xattrsOf (inode: MergedInode): Map<string, Buffer> | undefined {
    const raw = inode.entry.xattrs
    if (raw === undefined) return undefined
    let map = this.#xattrs[inode.ino]
    if (map === undefined) {
      map = new Map(Object.keys(raw).sort().map(name => [name, Buffer.from(raw[name]!, 'base64')]))
      this.#xattrs[inode.ino] = map
    }
    return map
  }
}
