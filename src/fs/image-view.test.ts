import t from 'tap'
import { constants as fsConstants } from 'node:fs'
import { mergeLayers } from '../format/merge.js'
import { ImageView, makedev } from './image-view.js'
import { MemoryImage, patternBytes } from './memory-image.js'

function view (): ImageView {
  const image = new MemoryImage()
  image.addLayer([
    { path: 'etc', type: 'dir' },
    { path: 'etc/passwd', type: 'file', content: Buffer.from('root:x:0:0\n'), uid: 3, gid: 4, mtime: 1234 },
    { path: 'b', type: 'file', content: patternBytes(5000, 1), xattrs: { 'user.k': Buffer.from('v1').toString('base64'), 'security.a': '' } },
    { path: 'h', type: 'hardlink', target: 'b' },
    { path: 'l', type: 'symlink', target: 'etc/passwd' },
    { path: 'null', type: 'char', devMajor: 1, devMinor: 3 },
    { path: 'sda', type: 'block', devMajor: 259, devMinor: 300000 },
    { path: 'p', type: 'fifo' },
    { path: 'Z', type: 'file', content: Buffer.from('z') },
    { path: 'old', type: 'file', mtime: -5, content: Buffer.from('o') }
  ], { chunkSize: 4096 })
  image.addLayer([{ path: 'Z', type: 'whiteout' }, { path: 'etc', type: 'dir', mode: 0o700 }], { chunkSize: 4096 })
  return new ImageView(mergeLayers(image.tocs))
}

t.test('ImageView.nodeAt() resolves FUSE paths and finds nothing under files or whiteouts', async t => {
  const v = view()
  t.equal(v.nodeAt('/')!.inode.ino, 1)
  const passwd = v.nodeAt('/etc/passwd')
  t.ok(passwd)
  t.equal(v.nodeAt('/etc/passwd'), passwd, 'the same node again')
  t.equal(v.nodeAt('/Z'), undefined, 'whited out')
  t.equal(v.nodeAt('/b/x'), undefined, 'below a file')
  t.equal(v.nodeAt('/nope/x'), undefined)
  t.equal(v.lookup(v.nodeAt('/etc')!.inode.ino, 'passwd'), passwd)
  t.equal(v.inode(passwd!.inode.ino), passwd!.inode)
})

t.test('ImageView.getattr() reports type bits, ids, sizes, times, links and devices', async t => {
  const v = view()
  const st = (p: string): ReturnType<ImageView['getattr']> => v.getattr(v.nodeAt(p)!.inode)
  t.equal(st('/etc/passwd').mode, fsConstants.S_IFREG | 0o644)
  t.match(st('/etc/passwd'), { uid: 3, gid: 4, size: 11, mtime: 1_234_000, atime: 1_234_000, ctime: 1_234_000, blocks: 1 })
  t.equal(st('/etc').mode, fsConstants.S_IFDIR | 0o700, 'upper layer metadata')
  t.equal(st('/etc').nlink, 2)
  t.equal(st('/').nlink, 3, 'root: 2 + one subdirectory')
  t.equal(st('/b').ino, st('/h').ino, 'hardlinks share the inode')
  t.equal(st('/b').nlink, 2)
  t.equal(st('/b').blocks, 10)
  t.equal(st('/l').mode, fsConstants.S_IFLNK | 0o644)
  t.equal(st('/l').size, 'etc/passwd'.length)
  t.equal(st('/null').mode & fsConstants.S_IFMT, fsConstants.S_IFCHR)
  t.equal(st('/null').rdev, 0x103)
  t.equal(st('/sda').mode & fsConstants.S_IFMT, fsConstants.S_IFBLK)
  t.equal(st('/sda').rdev, makedev(259, 300000))
  t.equal(st('/p').mode & fsConstants.S_IFMT, fsConstants.S_IFIFO)
  t.equal(st('/old').mtime, 0, 'times before 1970 read as 0')
  t.same(st('/b'), st('/b'), 'the same attributes every time')
  t.not(st('/b'), st('/b'), 'a fresh object each call: nothing cached per inode')
})

t.test('makedev() matches the Linux encoding', async t => {
  t.equal(makedev(8, 1), 0x801)
  t.equal(makedev(259, 300000), ((300000 & 0xff) | (259 << 8) | ((300000 & ~0xff) << 12)) >>> 0)
})

t.test('ImageView.readdir() lists . and .., then names in byte order, with stats', async t => {
  const v = view()
  const listing = v.readdir(1)!
  t.same(listing.names, ['.', '..', 'b', 'etc', 'h', 'l', 'null', 'old', 'p', 'sda'])
  t.equal(listing.stats.length, listing.names.length)
  t.equal(listing.stats[2]!.ino, v.nodeAt('/b')!.inode.ino)
  t.same(v.readdir(1), listing, 'the same listing again')
  t.equal(v.readdir(v.nodeAt('/b')!.inode.ino), undefined, 'not a directory')
  t.same(v.readdir(v.nodeAt('/etc')!.inode.ino)!.stats[1]!.ino, 1, '.. is the parent')
})

t.test('ImageView xattrs, readlink and statfs', async t => {
  const v = view()
  const b = v.nodeAt('/b')!.inode
  t.same(v.listxattr(b), ['security.a', 'user.k'])
  t.same(v.getxattr(b, 'user.k'), Buffer.from('v1'))
  t.same(v.getxattr(b, 'security.a'), Buffer.alloc(0))
  t.equal(v.getxattr(b, 'user.none'), undefined)
  t.same(v.listxattr(v.nodeAt('/l')!.inode), [])
  t.equal(v.readlink(v.nodeAt('/l')!.inode), 'etc/passwd')
  t.equal(v.readlink(b), undefined)
  t.equal(v.imageBytes, 11 + 5000 + 1, 'each inode once; whited-out content excluded')
  t.match(v.statfs(), { bsize: 4096, blocks: 2, bfree: 0, bavail: 0, files: v.inodeCount, namemax: 255 })
  t.equal(v.inodeCount, 9)
})
