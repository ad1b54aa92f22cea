// Real FUSE mounts (needs root and /dev/fuse). Every fs call on a mount
// from this process must be async: the ops are answered on this event loop.
import t, { type Test } from 'tap'
import { execFile, spawn } from 'node:child_process'
import { lstat, open, readdir, readFile, readlink, rm, rmdir, stat, statfs } from 'node:fs/promises'
import { constants as fsConstants } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { StoreUnavailableError } from '../errors.js'
import { lazyUnmount, mountedFsType } from './fuse-binding.js'
import { mountImage, type ImageMount, type MountImageOptions } from './image-mount.js'
import { MemoryChunkReader, type MemoryChunkReaderOptions } from './memory-chunk-reader.js'
import { MemoryImage, patternBytes, type MemoryEntry } from './memory-image.js'

/** image-mount-fuse-native.test.ts runs this suite again with LAYERD_FUSE_BACKEND=fuse-native; read here, as a composition root reads a setting. */
const BACKEND = process.env.LAYERD_FUSE_BACKEND === 'fuse-native' ? 'fuse-native' as const : undefined
const BACKEND_FUSE = BACKEND === undefined ? {} : { backend: BACKEND }

const run = promisify(execFile)
const CHUNK_64KIB = 64 * 1024
const MTIME = 1_700_000_123
const LONG_NAME = 'n'.repeat(255)
const UNICODE_NAME = 'ünïcödé ✓ name.txt'

/** Two layers with every entry kind, whiteouts, an opaque dir and stream-chunked small files. */
function buildImage (): { image: MemoryImage, files: Map<string, Buffer> } {
  const image = new MemoryImage()
  const files = new Map<string, Buffer>([
    ['etc/passwd', Buffer.from('root:x:0:0:root:/root:/bin/sh\n')],
    ['bin/sh', patternBytes(70_000, 11)],
    ['big', patternBytes(3 * 1024 * 1024 + 17, 12)],
    ['hard1', Buffer.from('hardlinked content\n')],
    ['xattr-file', Buffer.from('x')],
    ['suid', Buffer.from('#!/bin/sh\n')],
    ['empty', Buffer.alloc(0)],
    [LONG_NAME, Buffer.from('long')],
    [UNICODE_NAME, Buffer.from('unicode')],
    ['gone', Buffer.from('whited out')],
    ['olddir/kept-not', Buffer.from('hidden by opaque')]
  ])
  const f = (path: string, extra: Partial<MemoryEntry> = {}): MemoryEntry => ({ path, type: 'file', content: files.get(path), mtime: MTIME, ...extra })
  image.addLayer([
    { path: 'etc', type: 'dir', mtime: MTIME },
    f('etc/passwd'),
    { path: 'bin', type: 'dir' },
    f('bin/sh', { mode: 0o755 }),
    f('big'),
    f('hard1'),
    { path: 'hard2', type: 'hardlink', target: 'hard1' },
    f('xattr-file', { xattrs: { 'user.greeting': Buffer.from('hello').toString('base64'), 'trusted.bin': Buffer.from([0, 1, 2]).toString('base64') } }),
    f('suid', { mode: 0o4755, uid: 1000, gid: 1001 }),
    f('empty'),
    f(LONG_NAME),
    f(UNICODE_NAME),
    { path: 'dev', type: 'dir' },
    { path: 'dev/null', type: 'char', mode: 0o666, devMajor: 1, devMinor: 3 },
    { path: 'dev/sda1', type: 'block', mode: 0o660, devMajor: 8, devMinor: 1 },
    { path: 'dev/fifo', type: 'fifo', mode: 0o600 },
    { path: 'rel-link', type: 'symlink', target: 'etc/passwd' },
    { path: 'abs-link', type: 'symlink', target: '/etc/passwd' },
    f('gone'),
    { path: 'olddir', type: 'dir' },
    f('olddir/kept-not')
  ], { chunkSize: CHUNK_64KIB })
  const small = [['small/a', 100], ['small/b', 5000], ['small/c', 10], ['olddir/new', 3]] as const
  for (const [path, size] of small) files.set(path, patternBytes(size, size))
  files.delete('gone')
  files.delete('olddir/kept-not')
  image.addLayer([
    { path: 'gone', type: 'whiteout' },
    { path: 'olddir', type: 'opaque' },
    { path: 'etc', type: 'dir', mode: 0o750, mtime: MTIME },
    ...small.map(([path]) => f(path))
  ], { chunkSize: 4096, stream: true })
  return { image, files }
}

interface Mounted { mount: ImageMount, dir: string, reader: MemoryChunkReader, files: Map<string, Buffer>, image: MemoryImage, log: string[] }

/**
 * A fresh mountpoint for this test. Not t.testdir(): tap removes that
 * (synchronously) before teardowns run, so it would walk into a live mount
 * served by this very thread. Here teardown unmounts first, then removes.
 */
let mountpoints = 0
function mountpointFor (t: Test, unmount: () => Promise<void> | undefined): string {
  const dir = join(t.testdirName, `mnt-${++mountpoints}`)
  t.teardown(async () => {
    await unmount()
    await rm(dir, { recursive: true, force: true })
    await rmdir(t.testdirName).catch(() => {}) // the last mount of the test removes the base

  })
  return dir
}

async function mountFixture (t: Test, opts: Partial<MemoryChunkReaderOptions> & { fuse?: MountImageOptions['fuse'], store?: Map<string, Uint8Array> } = {}): Promise<Mounted> {
  const { image, files } = buildImage()
  let mount: ImageMount | undefined
  const dir = mountpointFor(t, () => mount?.unmount())
  const reader = new MemoryChunkReader({ store: opts.store ?? image.chunks, ...opts })
  const log: string[] = []
  mount = await mountImage({ mountpoint: dir, tocs: image.tocs, reader, log: l => log.push(l), fuse: { ...BACKEND_FUSE, ...opts.fuse } })
  return { mount, dir, reader, files, image, log }
}

/** Run a command, returning its exit code and stderr (never throws for a non-zero exit). */
async function sh (cmd: string, args: string[]): Promise<{ code: number, stdout: string, stderr: string }> {
  try {
    const { stdout, stderr } = await run(cmd, args, { encoding: 'utf8' })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code?: number, stdout?: string, stderr?: string }
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' }
  }
}

async function isMounted (dir: string): Promise<boolean> {
  return (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').some(l => l.split(' ')[4] === dir)
}

t.test('mountImage() serves every entry kind of the merged image to real syscalls', async t => {
  const { dir, files, mount } = await mountFixture(t)
  t.ok(await isMounted(dir), 'listed in mountinfo')
  t.equal(mount.backend, BACKEND ?? 'kernel', 'served by the backend this run is for')
  t.same(await readdir(dir), ['abs-link', 'big', 'bin', 'dev', 'empty', 'etc', 'hard1', 'hard2', LONG_NAME, 'olddir', 'rel-link', 'small', 'suid', UNICODE_NAME, 'xattr-file'].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))),
    'root listing: whiteout hides "gone"')
  t.same(await readdir(join(dir, 'olddir')), ['new'], 'opaque dir hides lower children')
  await t.rejects(lstat(join(dir, 'gone')), { code: 'ENOENT' })

  for (const [path, content] of files) {
    t.same(await readFile(join(dir, path)), content, `content of ${path}`)
    const st = await lstat(join(dir, path))
    t.equal(st.size, content.length, `size of ${path}`)
    t.equal(st.ino, mount.view.nodeAt(`/${path}`)!.inode.ino, `stable inode number of ${path}`)
  }
  const passwd = await lstat(join(dir, 'etc/passwd'))
  t.equal(passwd.mtimeMs, MTIME * 1000)
  t.equal(passwd.mode, fsConstants.S_IFREG | 0o644)
  t.equal(passwd.blocks, 1)
  t.equal((await lstat(join(dir, 'etc'))).mode, fsConstants.S_IFDIR | 0o750, 'upper layer directory metadata')
  const suid = await lstat(join(dir, 'suid'))
  t.equal(suid.mode & 0o7777, 0o4755)
  t.equal(suid.uid, 1000)
  t.equal(suid.gid, 1001)

  const [h1, h2] = await Promise.all([lstat(join(dir, 'hard1')), lstat(join(dir, 'hard2'))])
  t.equal(h1.ino, h2.ino, 'hardlinks share the inode number')
  t.equal(h1.nlink, 2)

  t.equal(await readlink(join(dir, 'rel-link')), 'etc/passwd')
  t.equal(await readlink(join(dir, 'abs-link')), '/etc/passwd')
  t.ok((await lstat(join(dir, 'rel-link'))).isSymbolicLink())
  t.same(await readFile(join(dir, 'rel-link')), files.get('etc/passwd'), 'a relative symlink resolves inside the mount')

  const devs = await sh('stat', ['-c', '%n %F %t %T %a', join(dir, 'dev/null'), join(dir, 'dev/sda1'), join(dir, 'dev/fifo')])
  t.same(devs.stdout.trim().split('\n').map(l => l.slice(dir.length + 1)), [
    'dev/null character special file 1 3 666',
    'dev/sda1 block special file 8 1 660',
    'dev/fifo fifo 0 0 600'
  ])
  const xattrs = await sh('getfattr', ['-d', '-m', '-', '-e', 'hex', join(dir, 'xattr-file')])
  t.match(xattrs.stdout, /trusted\.bin=0x000102/)
  t.match(xattrs.stdout, /user\.greeting=0x68656c6c6f/)
  t.equal((await sh('getfattr', ['--only-values', '-n', 'user.greeting', join(dir, 'xattr-file')])).stdout, 'hello')
  t.match((await sh('getfattr', ['-n', 'user.none', join(dir, 'xattr-file')])).stderr, /No such attribute/)

  const fsStat = await statfs(dir)
  t.equal(fsStat.bfree, 0)
  t.equal(fsStat.files, mount.view.inodeCount)
  t.equal(fsStat.blocks, Math.ceil(mount.view.imageBytes / fsStat.bsize))
  t.match((await sh('stat', ['-f', '-c', '%l', dir])).stdout.trim(), '255')
  t.match((await readFile('/proc/self/mountinfo', 'utf8')).split('\n').find(l => l.split(' ')[4] === dir), / ro,.* - fuse\.layerd layerd /)
  t.equal((await sh('find', [dir, '-samefile', join(dir, 'hard1')])).stdout.trim().split('\n').length, 2, 'find -samefile sees both links')
})

t.test('mountImage() reads at chunk boundaries, past EOF, in 1 MiB requests and in parallel', async t => {
  const { dir, files, mount } = await mountFixture(t)
  const big = files.get('big')!
  const fh = await open(join(dir, 'big'), 'r')
  t.teardown(async () => await fh.close())
  const cases: Array<[number, number]> = [[0, 1], [CHUNK_64KIB - 3, 6], [big.length - 5, 100], [big.length, 10], [big.length + 4096, 1], [123_457, 1024 * 1024], [0, 4 * 1024 * 1024]]
  for (const [pos, len] of cases) {
    const buf = Buffer.alloc(len)
    const { bytesRead } = await fh.read(buf, 0, len, pos)
    const want = big.subarray(Math.min(pos, big.length), Math.min(pos + len, big.length))
    t.equal(bytesRead, want.length, `bytes at ${pos}+${len}`)
    t.ok(buf.subarray(0, bytesRead).equals(want), `content at ${pos}+${len}`)
  }
  const all = await Promise.all([...files.keys()].map(async p => await readFile(join(dir, p))))
  t.ok(all.every((data, i) => data.equals([...files.values()][i]!)), 'parallel whole-file reads')
  t.ok(mount.stats().fetchReads > 0 && mount.stats().fetchedBytes > 0, 'the cold reads fetched')
  t.equal(mount.stats().corruptChunks, 0)
  const cmp = await sh('sh', ['-c', `cat "${join(dir, 'big')}" | sha256sum`])
  const { createHash } = await import('node:crypto')
  t.equal(cmp.stdout.split(' ')[0], createHash('sha256').update(big).digest('hex'), 'cat from another process')
})

t.test('mountImage() refuses every write with EROFS, at the kernel (ro) and in the ops', async t => {
  for (const readOnly of [true, false]) {
    const { dir } = await mountFixture(t, { warm: true, fuse: { readOnly } })
    const p = (x: string): string => join(dir, x)
    const attempts: Array<[string, string[]]> = [
      ['touch', [p('newfile')]],
      ['touch', [p('etc/passwd')]],
      ['rm', ['-f', p('etc/passwd')]],
      ['mv', [p('etc/passwd'), p('etc/passwd2')]],
      ['chmod', ['600', p('etc/passwd')]],
      ['chown', ['1:1', p('etc/passwd')]],
      ['setfattr', ['-n', 'user.x', '-v', '1', p('etc/passwd')]],
      ['setfattr', ['-x', 'user.greeting', p('xattr-file')]],
      ['mknod', [p('fifo2'), 'p']],
      ['ln', [p('etc/passwd'), p('hl')]],
      ['ln', ['-s', 'x', p('sl')]],
      ['mkdir', [p('d')]],
      ['rmdir', [p('olddir')]],
      ['truncate', ['-s', '0', p('etc/passwd')]],
      ['sh', ['-c', `echo x >> "${p('etc/passwd')}"`]],
      ['dd', ['if=/dev/zero', `of=${p('big')}`, 'bs=1', 'count=1', 'conv=notrunc']]
    ]
    for (const [cmd, args] of attempts) {
      const r = await sh(cmd, args)
      t.not(r.code, 0, `${cmd} ${args.join(' ')} fails (ro=${readOnly})`)
      t.match(r.stderr, /Read-only file system/, `${cmd} ${args[0] ?? ''}: EROFS (ro=${readOnly})`)
    }
    await t.rejects(open(p('etc/passwd'), 'r+'), { code: 'EROFS' }, `open O_RDWR (ro=${readOnly})`)
    await t.rejects(open(p('etc/passwd'), 'w'), { code: 'EROFS' }, `open O_WRONLY|O_TRUNC (ro=${readOnly})`)
    t.same(await readFile(p('etc/passwd')), Buffer.from('root:x:0:0:root:/root:/bin/sh\n'), 'unchanged')
    t.same(await readdir(p('olddir')), ['new'])
  }
})

t.test('mountImage() answers a fetch slower than the binding\'s op timeout, without ETIMEDOUT', async t => {
  // The binding's timeout is off in production. Here it is on (300 ms) for
  // every op but read, and a chunk fetch takes 3x as long: the read succeeds.
  const SLOW_FETCH_MS = 900
  const slow = { beforeFetch: async () => await new Promise<void>(resolve => setTimeout(resolve, SLOW_FETCH_MS)) }
  const exempt = await mountFixture(t, { ...slow, fuse: { opTimeout: { defaultMs: 300 } } })
  const started = Date.now()
  t.same(await readFile(join(exempt.dir, 'etc/passwd')), exempt.files.get('etc/passwd'))
  t.ok(Date.now() - started >= SLOW_FETCH_MS, 'the read did wait for the slow fetch')
  // Control: with the timeout applied to read too, the same fetch surfaces as ETIMEDOUT.
  const timed = await mountFixture(t, { ...slow, fuse: { opTimeout: { defaultMs: 300, readMs: 300 } } })
  await t.rejects(readFile(join(timed.dir, 'etc/passwd')), { code: 'ETIMEDOUT' })
})

t.test('mountImage() answers EIO, not a hang, when the store fails or a chunk is corrupt', async t => {
  const down = await mountFixture(t, { beforeFetch: () => { throw new StoreUnavailableError('GET blobs/ab: connect ECONNREFUSED 127.0.0.1:9') }, storeName: 's3://down-bucket' })
  await t.rejects(readFile(join(down.dir, 'etc/passwd')), { code: 'EIO' })
  t.match(down.log.join('\n'), /EIO: read "\/etc\/passwd" .*chunks sha256:[0-9a-f]{12}.*store s3:\/\/down-bucket unavailable/)
  t.ok(down.mount.stats().ioErrors >= 1)
  t.equal((await lstat(join(down.dir, 'etc/passwd'))).size, down.files.get('etc/passwd')!.length, 'metadata still served')

  const { image } = buildImage()
  const store = new Map(image.chunks)
  const digest = image.tocs[0]!.chunks[0]!.digest // etc/passwd's only chunk
  store.set(digest, Buffer.from('root:x:0:0:evil:/root:/bin/sh\n'))
  const corrupt = await mountFixture(t, { store })
  await t.rejects(readFile(join(corrupt.dir, 'etc/passwd')), { code: 'EIO' })
  await t.rejects(readFile(join(corrupt.dir, 'etc/passwd')), { code: 'EIO' }, 'still refused: never cached, never served')
  t.ok(corrupt.mount.stats().corruptChunks >= 2, 'each refusal counted (the kernel may retry a failed page read)')
  t.notOk(corrupt.reader.cache.has(digest))
  t.same(await readFile(join(corrupt.dir, 'bin/sh')), corrupt.files.get('bin/sh'), 'other files still read')
})

t.test('ImageMount.unmount() detaches a mount with an open file, which still reads; twice is fine', async t => {
  const { dir, files, mount } = await mountFixture(t, { warm: true })
  const fh = await open(join(dir, 'big'), 'r')
  const head = Buffer.alloc(100)
  await fh.read(head, 0, 100, 0)
  await Promise.all([mount.unmount(), mount.unmount()])
  t.notOk(await isMounted(dir), 'gone from mountinfo')
  t.same(await readdir(dir), [], 'the mountpoint is an empty directory again')
  const tail = Buffer.alloc(1000)
  const { bytesRead } = await fh.read(tail, 0, 1000, 2 * 1024 * 1024)
  t.equal(bytesRead, 1000)
  t.ok(tail.equals(files.get('big')!.subarray(2 * 1024 * 1024, 2 * 1024 * 1024 + 1000)), 'the open file still reads after unmount')
  await fh.close()
  await mount.unmount()
})

t.test('mountImage() cleans a stale mount left by a killed daemon, and refuses a live one', async t => {
  let mount: ImageMount | undefined
  const dir = mountpointFor(t, async () => {
    if (mount !== undefined) await mount.unmount()
    else if (await isMounted(dir)) await run('fusermount', ['-uz', dir])
  })
  const helper = `
    const { mountImage } = await import(${JSON.stringify(new URL('./image-mount.js', import.meta.url).href)})
    const { MemoryImage } = await import(${JSON.stringify(new URL('./memory-image.js', import.meta.url).href)})
    const { MemoryChunkReader } = await import(${JSON.stringify(new URL('./memory-chunk-reader.js', import.meta.url).href)})
    const image = new MemoryImage()
    image.addLayer([{ path: 'f', type: 'file', content: Buffer.from('x') }], { chunkSize: 4096 })
    await mountImage({ mountpoint: process.argv[1], tocs: image.tocs, reader: new MemoryChunkReader({ store: image.chunks }), log: () => {}, fuse: ${JSON.stringify(BACKEND_FUSE)} })
    process.stdout.write('mounted\\n')
    setInterval(() => {}, 1000)`
  const child = spawn(process.execPath, ['--input-type=module', '-e', helper, dir], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => { if (d.toString().includes('mounted')) resolve() })
    child.on('exit', code => reject(new Error(`helper exited ${code}`)))
  })
  t.ok(await isMounted(dir))
  await t.rejects(mountImage({ mountpoint: dir, tocs: [], reader: new MemoryChunkReader({ store: new Map() }), log: () => {} }), { name: 'UsageError', message: /live fuse\.layerd/ })
  child.kill('SIGKILL')
  await new Promise(resolve => child.on('exit', resolve))
  await t.rejects(readdir(dir), { code: 'ENOTCONN' }, 'a dead daemon fails fast')
  const { image, files } = buildImage()
  const log: string[] = []
  mount = await mountImage({ mountpoint: dir, tocs: image.tocs, reader: new MemoryChunkReader({ store: image.chunks }), log: l => log.push(l), fuse: BACKEND_FUSE })
  t.match(log.join('\n'), /cleaning a stale FUSE mount \(ENOTCONN\)/)
  t.same(await readFile(join(dir, 'etc/passwd')), files.get('etc/passwd'))
  t.equal((await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter(l => l.split(' ')[4] === dir).length, 1, 'one mount there, not two')
})

t.test('mountImage() lets other uids in (allow_other) and the kernel checks modes (default_permissions)', async t => {
  const image = new MemoryImage()
  image.addLayer([
    { path: 'public', type: 'file', mode: 0o644, content: Buffer.from('for everyone') },
    { path: 'secret', type: 'file', mode: 0o600, content: Buffer.from('root only') },
    { path: 'mine', type: 'file', mode: 0o600, uid: 65534, gid: 65534, content: Buffer.from('nobody\'s') },
    { path: 'locked', type: 'dir', mode: 0o700 },
    { path: 'locked/inner', type: 'file', mode: 0o644, content: Buffer.from('inner') }
  ], { chunkSize: 4096 })
  let mount: ImageMount | undefined
  const dir = mountpointFor(t, () => mount?.unmount())
  mount = await mountImage({ mountpoint: dir, tocs: image.tocs, reader: new MemoryChunkReader({ store: image.chunks }), log: () => {}, fuse: BACKEND_FUSE })
  const asNobody = async (...args: string[]): Promise<{ code: number, stdout: string, stderr: string }> =>
    await sh('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', ...args])
  t.equal((await asNobody('cat', join(dir, 'public'))).stdout, 'for everyone')
  t.equal((await asNobody('cat', join(dir, 'mine'))).stdout, 'nobody\'s', 'owner access by uid from the image')
  t.match((await asNobody('cat', join(dir, 'secret'))).stderr, /Permission denied/)
  t.match((await asNobody('cat', join(dir, 'locked/inner'))).stderr, /Permission denied/)
  t.equal((await sh('cat', [join(dir, 'secret')])).stdout, 'root only', 'root reads it')
})

t.test('mountImage() of an image without xattrs answers them as not supported, so the kernel stops asking', async t => {
  const image = new MemoryImage()
  image.addLayer([{ path: 'f', type: 'file', content: Buffer.from('x') }], { chunkSize: 4096 })
  let mount: ImageMount | undefined
  const dir = mountpointFor(t, () => mount?.unmount())
  mount = await mountImage({ mountpoint: dir, tocs: image.tocs, reader: new MemoryChunkReader({ store: image.chunks }), log: () => {}, fuse: BACKEND_FUSE })
  t.match((await sh('getfattr', ['-n', 'user.a', join(dir, 'f')])).stderr, /Operation not supported/)
  t.equal((await sh('ls', ['-l', join(dir, 'f')])).code, 0, 'ls -l still works')
  t.same(await readFile(join(dir, 'f')), Buffer.from('x'))
})

t.test('mountImage() refuses a mountpoint that is a regular file', async t => {
  const dir = t.testdir({ file: 'x' })
  await t.rejects(mountImage({ mountpoint: join(dir, 'file'), tocs: [], reader: new MemoryChunkReader({ store: new Map() }), log: () => {} }))
  t.equal((await stat(join(dir, 'file'))).isFile(), true)
})

t.test('lazyUnmount() of a directory with nothing mounted is not an error; mountedFsType() sees mounts', async t => {
  const dir = t.testdir()
  await lazyUnmount(dir)
  t.equal(await mountedFsType(dir), undefined)
  t.equal(await mountedFsType('/proc'), 'proc')
})
