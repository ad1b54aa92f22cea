import t from 'tap'
import { execFileSync } from 'node:child_process'
import { linkSync, lstatSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { lsetxattr, mknod } from '../../native.js'
import { scanDir, statPath } from './dir-scan.js'

t.test('scanDir() reports what lstat, readlink and the xattr calls do, for every child, sorted by name bytes', async t => {
  const d = t.testdir()
  writeFileSync(join(d, 'file'), 'hello')
  lsetxattr(join(d, 'file'), 'user.one', Buffer.from('1'))
  lsetxattr(join(d, 'file'), 'user.two', Buffer.alloc(3000, 7))
  linkSync(join(d, 'file'), join(d, 'hard'))
  symlinkSync('../somewhere/else', join(d, 'link'))
  mkdirSync(join(d, 'dir'))
  mknod(join(d, 'null'), 0o20644, 1, 3)
  writeFileSync(join(d, 'old'), '')
  execFileSync('touch', ['-h', '-d', '@-1.5', join(d, 'old')]) // before 1970, with a fraction: the floor is -2 (Node's utimes takes a negative time as now)
  writeFileSync(join(d, 'é'), '')
  const scanned = scanDir(d)
  t.same(scanned.map(e => e.name.toString()), ['dir', 'file', 'hard', 'link', 'null', 'old', 'é'], 'byte order: é (0xc3 0xa9) sorts last')
  for (const e of scanned) {
    const st = lstatSync(join(d, e.name.toString()), { bigint: true })
    t.same({ mode: e.mode, uid: e.uid, gid: e.gid, size: e.size, nlink: e.nlink, dev: e.dev, ino: e.ino },
      { mode: Number(st.mode), uid: Number(st.uid), gid: Number(st.gid), size: Number(st.size), nlink: Number(st.nlink), dev: st.dev, ino: st.ino }, `${e.name}: lstat fields`)
    const ns = st.mtimeNs
    t.equal(e.mtime, Number(ns / 1_000_000_000n) - (ns % 1_000_000_000n < 0n ? 1 : 0), `${e.name}: mtime seconds, rounded down`)
    t.equal(e.statError, undefined)
  }
  const by = new Map(scanned.map(e => [e.name.toString(), e]))
  t.equal(by.get('old')!.mtime, -2)
  t.equal(by.get('link')!.linkTarget?.toString(), '../somewhere/else')
  t.equal(by.get('file')!.linkTarget, undefined)
  t.same(by.get('null')!.rdevMajor, 1)
  t.same(by.get('null')!.rdevMinor, 3)
  const xattrs = new Map(by.get('file')!.xattrs.map(x => [x.name, x.value]))
  t.same(xattrs.get('user.one'), Buffer.from('1'))
  t.same(xattrs.get('user.two'), Buffer.alloc(3000, 7))
  t.same(by.get('hard')!.ino, by.get('file')!.ino, 'hardlinks share an inode')
})

t.test('statPath() reports a path itself, never following a symlink, and keeps an lstat failure as an errno error', async t => {
  const d = t.testdir({ target: { f: 'x' } })
  symlinkSync('target', join(d, 'link'))
  const link = statPath(join(d, 'link'))
  t.equal(link.mode & 0o170000, 0o120000, 'the symlink, not its target')
  t.equal(link.linkTarget?.toString(), 'target')
  const gone = statPath(join(d, 'gone'))
  t.match(gone.statError, { code: 'ENOENT', syscall: 'lstat', message: /^ENOENT: no such file or directory, lstat '.*gone'$/ })
  t.throws(() => scanDir(join(d, 'target', 'f')), { code: 'ENOTDIR' })
  t.throws(() => scanDir(join(d, 'link')), { code: /^(ENOTDIR|ELOOP)$/ }, 'a directory reached through a symlink is not listed')
})
