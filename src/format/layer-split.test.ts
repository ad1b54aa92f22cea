import t from 'tap'
import { mergeLayers, walkMerged, type MergedNode } from './merge.js'
import { splitTopLayer } from './layer-split.js'
import type { LayerToc, TocEntry } from './toc.js'

const ZERO = `sha256:${'0'.repeat(64)}`
const e = (path: string, type: TocEntry['type'] = 'file', extra: Partial<TocEntry> = {}): TocEntry =>
  ({ path, type, mode: type === 'dir' ? 0o755 : 0o644, uid: 0, gid: 0, mtime: 1, size: 0, ...extra })
const layer = (...entries: TocEntry[]): LayerToc => ({ diffId: ZERO, blobs: [], chunks: [], entries })
const base = mergeLayers([layer(e('', 'dir', { mtime: 77 }), e('usr', 'dir', { mode: 0o750, mtime: 5 }), e('usr/bin', 'dir'), e('usr/bin/sh'), e('etc', 'dir'), e('etc/hosts'))])
const at = (root: MergedNode, path: string): MergedNode | undefined => [...walkMerged(root)].find(x => x.path === path)?.node

t.test('splitTopLayer(): the top layer alone, its implied directories with the base\'s attributes', async t => {
  const split = splitTopLayer(base, layer(e('usr/bin/tool'), e('work', 'dir', { mode: 0o700 }), e('work/a'), e('etc', 'dir', { mode: 0o711 })))
  if (!('tree' in split)) return t.fail(split.reason)
  const tree = split.tree
  t.same([...walkMerged(tree.root)].map(x => x.path), ['', 'etc', 'usr', 'usr/bin', 'usr/bin/tool', 'work', 'work/a'], 'only the top layer\'s own entries and their parents')
  t.equal(tree.root.inode.entry.mtime, 77, 'the implied root keeps the base root\'s mtime, as a merge would')
  t.equal(at(tree.root, 'usr')!.inode.entry.mode, 0o750, 'implied usr: the base\'s mode')
  t.equal(at(tree.root, 'usr')!.inode.entry.mtime, 5)
  t.equal(at(tree.root, 'etc')!.inode.entry.mode, 0o711, 'an explicit directory keeps its own attributes')
  t.equal(at(tree.root, 'work')!.inode.entry.mode, 0o700)
  t.equal(tree.inodes[at(tree.root, 'usr')!.inode.ino], at(tree.root, 'usr')!.inode, 'the inode table follows')
})

t.test('splitTopLayer() refuses what overlayfs would show differently from a merge', async t => {
  const reason = (top: LayerToc): string => { const r = splitTopLayer(base, top); return 'reason' in r ? r.reason : '' }
  t.match(reason(layer(e('etc/hosts', 'whiteout'))), /removes/, 'a whiteout')
  t.match(reason(layer(e('etc', 'opaque'))), /removes/, 'an opaque directory')
  t.match(reason(layer(e('link', 'hardlink', { target: 'etc/hosts' }))), /depends on a lower layer/, 'a hardlink into the base')
  t.match(reason(layer(e('etc/hosts/inner'))), /where a lower layer has a file/, 'a directory implied over a base file')
  t.match(reason(layer(e('x', 'file', { xattrs: { 'trusted.overlay.opaque': 'eQ==' } }))), /trusted\.overlay/, 'overlay markers in xattrs')
  const ok = splitTopLayer(base, layer(e('a'), e('b', 'hardlink', { target: 'a' })))
  t.ok('tree' in ok, 'a hardlink within the top layer is fine')
})
