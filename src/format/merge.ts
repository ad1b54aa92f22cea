/**
 * Merging layer TOCs into one root filesystem tree: overlay semantics, the
 * way `docker pull` applies layer tars in order.
 *
 * - Layers apply lowest first. Within a layer, whiteout and opaque markers
 *   apply first (they hide lower content only), then the entries in order.
 * - A directory over a directory keeps the lower one's children and takes
 *   the upper one's metadata; anything else replaces what was there.
 * - A hardlink shares the inode of its target (same layer, earlier, or a
 *   lower layer). Replacing the target later leaves the link's inode alone.
 * - Missing parents become implicit directories (0755 root:root, mtime 0).
 * - Entries that cannot apply (parent is not a directory, hardlink to a
 *   missing or directory target) are skipped and reported as conflicts; push
 *   refuses images that have any, readers of a stored image skip them.
 *
 * Inode numbers are assigned in merge order, so the same TOCs always give
 * the same numbers. The root is inode 1.
 *
 * Pure: no fs, network or native code.
 */
import { baseName, joinPath, parentPath } from './paths.js'
import type { LayerToc, TocEntry } from './toc.js'

export interface MergedInode {
  ino: number
  /** Attributes and content; for a hardlink, the target's entry. */
  entry: TocEntry
  /** Index (in the TOC list) of the layer whose TOC holds `entry` and its chunk spans. */
  layer: number
  /** Paths naming this inode (directories: 2 + subdirectories). */
  nlink: number
}

export interface MergedNode {
  name: string
  inode: MergedInode
  /** Directories only; insertion order (use sortedChildren for a stable listing). */
  children?: Map<string, MergedNode>
}

export interface MergeConflict { layer: number, path: string, reason: string }

export interface MergedTree {
  root: MergedNode
  /** Every inode, indexed by number (index 0 unused). */
  inodes: MergedInode[]
  conflicts: MergeConflict[]
}

const IMPLICIT_DIR_MODE = 0o755

export function mergeLayers (tocs: readonly LayerToc[]): MergedTree {
  const inodes: MergedInode[] = []
  const newInode = (entry: TocEntry, layer: number): MergedInode => {
    const inode = { ino: inodes.length === 0 ? 1 : inodes.length, entry, layer, nlink: 1 }
    if (inodes.length === 0) inodes.push(inode) // keep index 0 unused: root is 1
    inodes.push(inode)
    return inode
  }
  const implicitDir = (path: string, layer: number): TocEntry =>
    ({ path, type: 'dir', mode: IMPLICIT_DIR_MODE, uid: 0, gid: 0, mtime: 0, size: 0 })
  const root: MergedNode = { name: '', inode: newInode(implicitDir('', 0), 0), children: new Map() }
  const conflicts: MergeConflict[] = []

  const lookup = (path: string): MergedNode | undefined => {
    if (path === '') return root
    let node: MergedNode | undefined = root
    for (const part of path.split('/')) {
      node = node.children?.get(part)
      if (node === undefined) return undefined
    }
    return node
  }

  /** The directory that should hold `path`, creating implicit parents; undefined when a parent is not a directory. */
  const parentDir = (path: string, layer: number): MergedNode | undefined => {
    const parent = parentPath(path)
    if (parent === undefined) return undefined
    let node = root
    if (parent === '') return node
    let walked = ''
    for (const part of parent.split('/')) {
      walked = joinPath(walked, part)
      let next = node.children!.get(part)
      if (next === undefined) {
        next = { name: part, inode: newInode(implicitDir(walked, layer), layer), children: new Map() }
        node.children!.set(part, next)
      }
      if (next.children === undefined) return undefined
      node = next
    }
    return node
  }

  tocs.forEach((toc, layer) => {
    for (const e of toc.entries) {
      if (e.type === 'whiteout') {
        const parent = lookup(parentPath(e.path) ?? '')
        parent?.children?.delete(baseName(e.path))
      } else if (e.type === 'opaque') {
        lookup(e.path)?.children?.clear()
      }
    }
    for (const e of toc.entries) {
      if (e.type === 'whiteout' || e.type === 'opaque') continue
      if (e.path === '') {
        if (e.type === 'dir') root.inode = { ...root.inode, entry: e, layer }
        else conflicts.push({ layer, path: e.path, reason: 'the root is not a directory' })
        inodes[1] = root.inode
        continue
      }
      const dir = parentDir(e.path, layer)
      if (dir === undefined) {
        conflicts.push({ layer, path: e.path, reason: 'its parent is not a directory' })
        continue
      }
      const name = baseName(e.path)
      const existing = dir.children!.get(name)
      if (e.type === 'hardlink') {
        const target = lookup(e.target!)
        if (target === undefined || target.children !== undefined) {
          conflicts.push({ layer, path: e.path, reason: `hardlink target ${JSON.stringify(e.target)} ${target === undefined ? 'does not exist' : 'is a directory'}` })
          continue
        }
        if (target === existing) continue
        dir.children!.set(name, { name, inode: target.inode })
        continue
      }
      if (e.type === 'dir' && existing?.children !== undefined) {
        const inode = { ...existing.inode, entry: e, layer }
        inodes[inode.ino] = inode
        existing.inode = inode
        continue
      }
      const node: MergedNode = { name, inode: newInode(e, layer) }
      if (e.type === 'dir') node.children = new Map()
      dir.children!.set(name, node)
    }
  })
  countLinks(root)
  return { root, inodes, conflicts }
}

/** Recompute nlink over the final tree: files by the paths naming them, directories 2 + subdirectories. */
function countLinks (root: MergedNode): void {
  const seen = new Set<MergedInode>()
  const visit = (node: MergedNode): void => {
    if (node.children === undefined) {
      if (!seen.has(node.inode)) { seen.add(node.inode); node.inode.nlink = 0 }
      node.inode.nlink++
      return
    }
    let subdirs = 0
    for (const child of node.children.values()) {
      if (child.children !== undefined) subdirs++
      visit(child)
    }
    node.inode.nlink = 2 + subdirs
  }
  visit(root)
}

/** Children sorted by name (byte order), for listings and exports that must be deterministic. */
export function sortedChildren (node: MergedNode): MergedNode[] {
  if (node.children === undefined) return []
  return [...node.children.values()].sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)))
}

/** Depth-first walk in sorted order, parents before children, with each node's full path. */
export function * walkMerged (root: MergedNode): Generator<{ path: string, node: MergedNode }> {
  const stack: Array<{ path: string, node: MergedNode }> = [{ path: '', node: root }]
  while (stack.length > 0) {
    const item = stack.pop()!
    yield item
    const kids = sortedChildren(item.node)
    for (let i = kids.length - 1; i >= 0; i--) stack.push({ path: joinPath(item.path, kids[i]!.name), node: kids[i]! })
  }
}
