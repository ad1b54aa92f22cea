import t from 'tap'
import { mergeLayers, walkMerged, type MergedTree } from './merge.js'
import type { LayerToc, TocEntry } from './toc.js'

const ZERO = `sha256:${'0'.repeat(64)}`
const e = (path: string, type: TocEntry['type'] = 'file', extra: Partial<TocEntry> = {}): TocEntry =>
  ({ path, type, mode: type === 'dir' ? 0o755 : 0o644, uid: 0, gid: 0, mtime: 1, size: 0, ...extra })
const layer = (...entries: TocEntry[]): LayerToc => ({ diffId: ZERO, blobs: [], chunks: [], entries })
const paths = (tree: MergedTree): string[] => [...walkMerged(tree.root)].map(x => x.path)

t.test('mergeLayers() applies whiteouts and opaque markers to lower layers only', async t => {
  const tree = mergeLayers([
    layer(e('a', 'dir'), e('a/x'), e('a/y'), e('b', 'dir'), e('b/z'), e('c')),
    layer(e('a', 'dir'), e('a', 'opaque'), e('a/new'), e('c', 'whiteout'), e('c'), e('b/z', 'whiteout'))
  ])
  t.same(paths(tree), ['', 'a', 'a/new', 'b', 'c'])
  t.same(tree.conflicts, [])
})

t.test('mergeLayers() keeps a lower directory\'s children and takes the upper metadata', async t => {
  const tree = mergeLayers([layer(e('d', 'dir'), e('d/f')), layer(e('d', 'dir', { mode: 0o700, uid: 5 }))])
  const d = tree.root.children!.get('d')!
  t.equal(d.inode.entry.mode, 0o700)
  t.equal(d.inode.entry.uid, 5)
  t.equal(d.inode.layer, 1)
  t.ok(d.children!.has('f'))
  t.equal(tree.inodes[d.inode.ino], d.inode)
})

t.test('mergeLayers() shares inodes between hardlinks, across layers too', async t => {
  const tree = mergeLayers([layer(e('f', 'file', { size: 0 })), layer(e('g', 'hardlink', { target: 'f' }), e('h', 'hardlink', { target: 'g' }))])
  const [f, g, h] = ['f', 'g', 'h'].map(n => tree.root.children!.get(n)!)
  t.equal(f!.inode, g!.inode)
  t.equal(f!.inode, h!.inode)
  t.equal(f!.inode.nlink, 3)
  t.equal(f!.inode.layer, 0)
})

t.test('mergeLayers() creates implicit parents and reports entries under non-directories', async t => {
  const tree = mergeLayers([layer(e('x/y/z'), e('l', 'symlink', { target: '/etc' }), e('l/passwd'), e('k', 'hardlink', { target: 'nope' }))])
  t.same(paths(tree), ['', 'l', 'x', 'x/y', 'x/y/z'])
  t.equal(tree.root.children!.get('x')!.inode.entry.mode, 0o755)
  t.same(tree.conflicts.map(c => c.path), ['l/passwd', 'k'])
})

t.test('mergeLayers() assigns the same inode numbers to the same input', async t => {
  const input = [layer(e('a', 'dir'), e('a/b'), e('c')), layer(e('a/d'))]
  const one = [...walkMerged(mergeLayers(input).root)].map(x => [x.path, x.node.inode.ino])
  const two = [...walkMerged(mergeLayers(input).root)].map(x => [x.path, x.node.inode.ino])
  t.same(one, two)
  t.equal(mergeLayers(input).root.inode.ino, 1)
  t.equal(mergeLayers(input).root.inode.nlink, 3)
})

t.test('mergeLayers() replaces a directory by a file and drops its subtree', async t => {
  const tree = mergeLayers([layer(e('a', 'dir'), e('a/b')), layer(e('a'))])
  t.same(paths(tree), ['', 'a'])
  t.equal(tree.root.children!.get('a')!.children, undefined)
})
