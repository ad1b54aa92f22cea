/**
 * The merged tree of an image as an ordered list of things to write, shared
 * by the tar and directory exporters: parents before children, names sorted,
 * the first path of a hardlinked inode carrying its content and every later
 * path a link to that first one.
 *
 * May import: src/format/, this folder.
 */
import { walkMerged, type MergedInode, type MergedTree } from '../format/merge.js'
import type { LayerToc, TocEntry } from '../format/toc.js'
import type { FileContent } from './content-pipeline.js'

export interface WalkItem {
  path: string
  entry: TocEntry
  /** Set on the second and later paths of a regular file inode: the first path. */
  linkTo?: string
  /** Set on the first path of a regular file with content. */
  content?: FileContent
}

export function planExport (tree: MergedTree, tocs: readonly LayerToc[]): WalkItem[] {
  const firstPath = new Map<MergedInode, string>()
  const items: WalkItem[] = []
  for (const { path, node } of walkMerged(tree.root)) {
    const { inode } = node
    const entry = inode.entry
    const item: WalkItem = { path, entry }
    if (node.children === undefined && entry.type === 'file') {
      const first = firstPath.get(inode)
      if (first !== undefined) item.linkTo = first
      else {
        firstPath.set(inode, path)
        item.content = { toc: tocs[inode.layer]!, spans: entry.spans ?? [] }
      }
    } else if (node.children === undefined && inode.nlink > 1 && entry.type !== 'dir') {
      // hardlinked symlinks, devices and fifos: keep the identity too
      const first = firstPath.get(inode)
      if (first !== undefined) item.linkTo = first
      else firstPath.set(inode, path)
    }
    items.push(item)
  }
  return items
}

export function contentsOf (items: readonly WalkItem[]): FileContent[] {
  return items.flatMap(i => (i.content === undefined ? [] : [i.content]))
}
