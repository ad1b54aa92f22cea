/**
 * Serving an image as two stacked read-only trees: its lower layers merged
 * (shared by every image built on them) and its top layer on its own, with
 * overlayfs putting the top over the base (src/daemon/mounts/image-stacks.ts). The
 * page cache of the base's files is then shared by all those images, as
 * overlay2 shares a base layer's; one merged tree per image would read the
 * base through each image's own mount.
 *
 * The stack must show exactly what merging every layer shows. Overlayfs
 * differs from mergeLayers() in three places, so a top layer is split off
 * only when none of them applies:
 * - whiteouts and opaque directories (overlayfs wants them as 0:0 devices
 *   and xattrs), and `trusted.overlay.*` xattrs (overlayfs would act on
 *   them): the top layer has none;
 * - a hardlink to a file of a lower layer (overlayfs cannot link across
 *   layers): every hardlink target is in the top layer;
 * - directories the top layer only implies (a parent it has no entry for):
 *   merging keeps the lower layer's directory and its attributes, while
 *   overlayfs takes the topmost layer's. So such a directory gets the
 *   base's attributes here; and where the base has a non-directory at
 *   that path (merging would skip the top layer's entries below it) the
 *   layer is not split.
 *
 * May import: ./merge.ts, ./toc.ts.
 */
import { mergeLayers, type MergedNode, type MergedTree } from './merge.js'
import type { LayerToc } from './toc.js'

/** overlayfs reads its own markers (opaque, redirect, origin…) from these. */
const OVERLAY_XATTR_PREFIX = 'trusted.overlay.'

export type TopLayerSplit = { tree: MergedTree } | { reason: string }

/** The top layer's own tree, to stack over `base` (the merged tree of the layers below it), or why it cannot be. Sync; O(top entries). */
export function splitTopLayer (base: MergedTree, top: LayerToc): TopLayerSplit {
  const explicit = new Set<string>()
  for (const e of top.entries) {
    if (e.type === 'whiteout' || e.type === 'opaque') return { reason: `the top layer removes ${JSON.stringify(e.path)} (${e.type})` }
    if (e.xattrs !== undefined && Object.keys(e.xattrs).some(n => n.startsWith(OVERLAY_XATTR_PREFIX))) {
      return { reason: `${JSON.stringify(e.path)} carries ${OVERLAY_XATTR_PREFIX}* xattrs, which overlayfs would act on` }
    }
    explicit.add(e.path)
  }
  const tree = mergeLayers([top])
  if (tree.conflicts.length > 0) {
    const c = tree.conflicts[0]!
    return { reason: `the top layer's ${JSON.stringify(c.path)} depends on a lower layer: ${c.reason}` }
  }
  // Implied directories: the base's attributes, as merging would keep them.
  const stack: Array<[MergedNode, MergedNode | undefined, string]> = [[tree.root, base.root, '']]
  while (stack.length > 0) {
    const [node, below, path] = stack.pop()!
    if (node.children === undefined) continue
    if (!explicit.has(path) && below !== undefined) {
      if (below.children === undefined) return { reason: `the top layer puts a directory at ${JSON.stringify(path)}, where a lower layer has a ${below.inode.entry.type}` }
      const inode = { ...node.inode, entry: { ...below.inode.entry, path } }
      tree.inodes[inode.ino] = inode
      node.inode = inode
    }
    for (const [name, child] of node.children) {
      stack.push([child, below?.children?.get(name), path === '' ? name : `${path}/${name}`])
    }
  }
  return { tree }
}
