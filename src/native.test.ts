import t from 'tap'
import { constants } from 'node:fs'
import { lstat, symlink } from 'node:fs/promises'
import { join } from 'node:path'
import { execFileSync } from 'node:child_process'
import { closeSync, openSync } from 'node:fs'
import { readFile, truncate, writeFile } from 'node:fs/promises'
import { flock, lgetxattr, llistxattr, lsetxattr, LOCK_EX, LOCK_NB, LOCK_SH, LOCK_UN, mknod, nativeMounts, nativeVersion, readXattrs, XATTR_CREATE } from './native.js'

t.test('nativeVersion() reports the xattr/mknod/FUSE server/FastCDC/flock/takeover/memory/mountLoop-runs/spawnVfork/childWaitAsync/seccomp-supervisor/openInRoot interface', async t => {
  t.equal(nativeVersion(), 13)
})

t.test('flock() takes an exclusive lock once per open file description, and gives it up on LOCK_UN or close', async t => {
  const path = join(t.testdir(), 'lock')
  const a = openSync(path, 'a')
  const b = openSync(path, 'a')
  t.teardown(() => { try { closeSync(a) } catch {} try { closeSync(b) } catch {} })
  t.equal(flock(a, LOCK_EX | LOCK_NB), true, 'the first open takes it')
  t.equal(flock(b, LOCK_EX | LOCK_NB), false, 'a second open of the same file is refused (EWOULDBLOCK), not thrown')
  t.equal(flock(b, LOCK_SH | LOCK_NB), false, 'a shared lock conflicts too')
  t.equal(flock(a, LOCK_UN), true)
  t.equal(flock(b, LOCK_EX | LOCK_NB), true, 'free again after LOCK_UN')
  closeSync(b)
  t.equal(flock(a, LOCK_EX | LOCK_NB), true, 'closing the holder releases it')
  t.throws(() => flock(987654, LOCK_EX | LOCK_NB), { code: 'EBADF', syscall: 'flock' })
})

t.test('lsetxattr()/lgetxattr()/llistxattr() round-trip binary values without following symlinks', async t => {
  const dir = t.testdir({ f: 'x' })
  const f = join(dir, 'f')
  const value = Buffer.from([0x01, 0x00, 0xff, 0x80, 0x0a])
  lsetxattr(f, 'user.bin', value)
  lsetxattr(f, 'user.empty', new Uint8Array(0))
  t.same(llistxattr(f).sort(), ['user.bin', 'user.empty'])
  t.same(lgetxattr(f, 'user.bin'), value)
  t.equal(lgetxattr(f, 'user.empty').length, 0)
  t.same(readXattrs(f), { 'user.bin': value.toString('base64'), 'user.empty': '' })
  // getfattr (attr package) sees what we wrote: a second implementation.
  t.match(execFileSync('getfattr', ['-n', 'user.bin', '-e', 'hex', f]).toString(), /user\.bin=0x0100ff800a/)

  const link = join(dir, 'link')
  await symlink('f', link)
  t.same(llistxattr(link).filter(n => n.startsWith('user.')), [], 'the link itself has no user xattrs')
  // Linux refuses user.* xattrs on symlinks: the call reaches the link, not its target.
  t.throws(() => lsetxattr(link, 'user.x', Buffer.from('y')), { code: 'EPERM', syscall: 'lsetxattr' })
  t.equal(readXattrs(link), undefined)
})

t.test('native errors carry Node-style codes', async t => {
  const dir = t.testdir({ f: 'x' })
  const missing = join(dir, 'missing')
  t.throws(() => llistxattr(missing), { code: 'ENOENT', syscall: 'llistxattr', path: missing, message: /^ENOENT: .*llistxattr/ })
  t.throws(() => lgetxattr(join(dir, 'f'), 'user.absent'), { code: 'ENODATA' })
  lsetxattr(join(dir, 'f'), 'user.once', Buffer.from('1'), XATTR_CREATE)
  t.throws(() => lsetxattr(join(dir, 'f'), 'user.once', Buffer.from('2'), XATTR_CREATE), { code: 'EEXIST' })
  t.throws(() => lgetxattr(join(dir, 'f'), 'x'.repeat(300)), TypeError)
  t.throws(() => llistxattr('a\0b'), TypeError)
})

t.test('mknod() creates device nodes and fifos', async t => {
  const dir = t.testdir({})
  const dev = join(dir, 'null')
  mknod(dev, constants.S_IFCHR | 0o600, 1, 3)
  const st = await lstat(dev)
  t.ok(st.isCharacterDevice())
  t.equal(st.rdev, (1 << 8) | 3)
  t.equal(st.mode & 0o777, 0o600)
  const big = join(dir, 'big')
  mknod(big, constants.S_IFBLK | 0o640, 259, 1_048_575)
  const bst = await lstat(big)
  t.ok(bst.isBlockDevice())
  t.match(execFileSync('stat', ['-c', '%Hr:%Lr', big]).toString().trim(), '259:1048575')
  const fifo = join(dir, 'fifo')
  mknod(fifo, constants.S_IFIFO | 0o644, 0, 0)
  t.ok((await lstat(fifo)).isFIFO())
  t.throws(() => mknod(fifo, constants.S_IFIFO | 0o644, 0, 0), { code: 'EEXIST', syscall: 'mknod' })
})

t.test('mountLoop() writes its runs through the loop device before the mount, and leaves no device behind on bad runs', async t => {
  let target = ''
  t.teardown(() => { try { nativeMounts().umount2(target, 0) } catch {} }) // before the testdir's removal (first in, first out)
  const dir = t.testdir({ mnt: {} })
  target = join(dir, 'mnt')
  const made = join(dir, 'made.img')
  await writeFile(made, '')
  await truncate(made, 16 * 1024 ** 2)
  execFileSync('mkfs.ext4', ['-q', '-F', '-O', '^has_journal', made])
  const disk = join(dir, 'disk.img')
  await writeFile(disk, '')
  await truncate(disk, 16 * 1024 ** 2) // a hole: only the runs make it a filesystem
  const backedBy = (): string => execFileSync('losetup', ['-j', disk]).toString().trim()

  t.throws(() => nativeMounts().mountLoop(disk, target, 'ext4', 0, '', [[-1, Buffer.alloc(1)]]), { name: 'TypeError' }, 'a negative offset')
  t.throws(() => nativeMounts().mountLoop(disk, target, 'ext4', 0, '', [[0, 'text' as unknown as Buffer]]), { name: 'TypeError' }, 'a run that is not bytes')
  t.equal(backedBy(), '', 'no loop device is left on the file after a refused call')
  t.throws(() => nativeMounts().mountLoop(disk, target, 'ext4', 0, ''), { code: 'EINVAL', syscall: 'mount' }, 'without runs the hole is no filesystem')

  nativeMounts().mountLoop(disk, target, 'ext4', 0, '', [[0, await readFile(made)]])
  await writeFile(join(target, 'hello'), 'through the device')
  nativeMounts().umount2(target, 0)
  t.equal(execFileSync('debugfs', ['-R', 'cat /hello', disk], { stdio: ['ignore', 'pipe', 'ignore'] }).toString(), 'through the device', 'the file holds the filesystem and what was written to it')
  t.equal(backedBy(), '', 'the device cleared itself at the unmount')
})
