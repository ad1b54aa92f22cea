// The kernel-protocol FUSE backend (native/fuse_server.c) on real mounts:
// what it does that fuse-native cannot. The shared mount behaviour (every
// entry kind, reads, errors, unmount) is image-mount.test.ts, which runs on
// this backend by default and on fuse-native in image-mount-fuse-native.test.ts.
import t, { type Test } from 'tap'
import { execFileSync } from 'node:child_process'
import { constants as osConstants } from 'node:os'
import { lstat, readdir, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { mergeLayers } from '../format/merge.js'
import { nativeFuseServer } from '../native.js'
import { mountImage, type ImageMount } from './image-mount.js'
import { encodeKernelFuseTable } from './kernel-fuse-table.js'
import { kernelFuseUnavailable } from './kernel-fuse.js'
import { FUSE_ERRNOS } from './fuse-errnos.js'
import { DEFAULT_FUSE_OPTIONS } from './image-mount.js'
import { ImageView } from './image-view.js'
import { MemoryChunkReader } from './memory-chunk-reader.js'
import { MemoryImage, patternBytes } from './memory-image.js'

const why = kernelFuseUnavailable(DEFAULT_FUSE_OPTIONS)
if (why !== undefined) t.plan(0, `kernel FUSE backend unavailable: ${why}`)

function image (): MemoryImage {
  const img = new MemoryImage()
  img.addLayer([
    { path: 'dir', type: 'dir', mtime: 1_700_000_000 },
    { path: 'dir/b', type: 'file', content: patternBytes(200_000, 1) },
    { path: 'dir/a', type: 'file', content: Buffer.from('a\n') },
    { path: 'dir/sub', type: 'dir' },
    { path: 'old', type: 'file', content: Buffer.from('1969\n'), mtime: -86_400 },
    { path: 'link', type: 'symlink', target: 'dir/a' }
  ], { chunkSize: 64 * 1024 })
  return img
}

async function mounted (t: Test, warm: boolean): Promise<{ dir: string, mount: ImageMount }> {
  const img = image()
  const dir = join(t.testdirName, 'mnt')
  const mount = await mountImage({ mountpoint: dir, tocs: img.tocs, reader: new MemoryChunkReader({ store: img.chunks, warm }), log: () => {}, fuse: { backend: 'kernel' } })
  t.teardown(async () => {
    await mount.unmount()
    await rm(t.testdirName, { recursive: true, force: true })
  })
  return { dir, mount }
}

t.test('the kernel backend answers metadata on its own threads: it works while the event loop is blocked', async t => {
  const { dir, mount } = await mounted(t, true)
  t.equal(mount.backend, 'kernel')
  // execFileSync blocks this thread: an op that needed JS would hang until the timeout kills ls.
  const out = execFileSync('sh', ['-c', `ls -lnR "${dir}" && readlink "${dir}/link" && stat -c '%s %Y' "${dir}/old"`], { encoding: 'utf8', timeout: 10_000 })
  t.match(out, /dir\/a\n/, 'readlink answered')
  t.match(out, /^5 -86400$/m, 'stat answered, with a time before 1970 as it is')
  t.match(out, /-rw-r--r-- 1 0 0 200000 /, 'ls -l answered')
})

t.test('the kernel skips OPEN and OPENDIR, keeps the page cache across opens and caches listings', async t => {
  const { dir, mount } = await mounted(t, true)
  t.same(await readdir(join(dir, 'dir')), ['a', 'b', 'sub'])
  const listed = mount.serverCounters()!.readdirs
  t.ok(listed >= 1 && listed <= 2, 'the first listing: READDIRPLUS, then one more at the end offset')
  for (let i = 0; i < 5; i++) {
    t.same(await readdir(join(dir, 'dir')), ['a', 'b', 'sub'])
    t.equal((await readFile(join(dir, 'dir/b'))).length, 200_000)
  }
  const c = mount.serverCounters()!
  t.equal(c.opens, 2, 'one OPEN and one OPENDIR, each answered ENOSYS, then none')
  t.equal(c.readdirs, listed, 'later listings come from the kernel\'s cache')
  const reads = c.reads
  await readFile(join(dir, 'dir/b'))
  t.equal(mount.serverCounters()!.reads, reads, 'a reopened file reads from the page cache')
  t.equal((await lstat(join(dir, 'old'))).mtimeMs, -86_400_000, 'negative mtime carried')
})

t.test('cold reads through the kernel backend fetch, and the counters show them', async t => {
  const { dir, mount } = await mounted(t, false)
  t.same(await readFile(join(dir, 'dir/b')), patternBytes(200_000, 1))
  t.ok(mount.stats().fetchReads > 0, 'the read waited for a fetch')
  t.ok(mount.serverCounters()!.reads >= 1)
})

t.test('the metadata table: sorted entries, and the server refuses a damaged one', async t => {
  const tree = mergeLayers(image().tocs)
  const table = encodeKernelFuseTable(new ImageView(tree))
  t.equal(table.bytes.readUInt32LE(0), 0x5446444c, 'magic')
  t.equal(table.bytes.readUInt32LE(8), tree.inodes.length - 1, 'one node per inode number')
  t.equal(table.pathOf(tree.root.children!.get('dir')!.children!.get('b')!.inode.ino), '/dir/b')
  const dir = join(t.testdirName, 'bad')
  await rm(dir, { recursive: true, force: true })
  execFileSync('mkdir', ['-p', dir])
  const opts = { entryValidS: 1, attrValidS: 1, negativeValidS: 1, maxPages: 32, maxReadahead: 131072, errnos: FUSE_ERRNOS }
  t.throws(() => nativeFuseServer().fuseServerMount(dir, 'layerd', '', opts, table.bytes.subarray(0, table.bytes.length - 1), () => {}),
    /table length does not match/, 'a truncated table is refused before mounting')
  const lying = Buffer.from(table.bytes)
  lying.writeUInt32LE(0xffffffff, 48 + 72 * 1 + 56) // the root's first entry, far out of range
  t.throws(() => nativeFuseServer().fuseServerMount(dir, 'layerd', '', opts, lying, () => {}), /out of range/, 'an entry out of range is refused')
  t.notOk((await readFile('/proc/self/mountinfo', 'utf8')).includes(` ${dir} `), 'nothing mounted')
  await rm(t.testdirName, { recursive: true, force: true })
})


t.test('`fuseServerMount` answers with the errno table JS gives it, and refuses a missing or bad one', async t => {
  const table = encodeKernelFuseTable(new ImageView(mergeLayers(image().tocs)))
  const dir = join(t.testdirName, 'mnt')
  await rm(t.testdirName, { recursive: true, force: true })
  execFileSync('mkdir', ['-p', dir])
  const opts = { entryValidS: 1, attrValidS: 1, negativeValidS: 0, maxPages: 32, maxReadahead: 131072 }
  const native = nativeFuseServer()
  t.throws(() => native.fuseServerMount(dir, 'layerd', '', opts as never, table.bytes, () => {}), /errnos/, 'no table: refused, naming errnos')
  t.throws(() => native.fuseServerMount(dir, 'layerd', '', { ...opts, errnos: { ...FUSE_ERRNOS, noEntry: 0 } }, table.bytes, () => {}), /errnos/, 'an errno of 0: refused')
  t.throws(() => native.fuseServerMount(dir, 'layerd', '', { ...opts, errnos: { ...FUSE_ERRNOS, ioError: undefined } as never }, table.bytes, () => {}), /errnos/, 'an errno missing: refused')
  // A number no default answer uses: what the kernel reports for a missing name comes from the table given.
  const { EXDEV } = osConstants.errno
  native.fuseServerMount(dir, 'layerd', '', { ...opts, errnos: { ...FUSE_ERRNOS, noEntry: EXDEV } }, table.bytes, () => {})
  t.teardown(async () => {
    execFileSync('umount', ['-l', dir])
    await rm(t.testdirName, { recursive: true, force: true })
  })
  t.equal((await lstat(join(dir, 'dir/a'))).size, 2, 'the mount serves')
  await t.rejects(lstat(join(dir, 'dir/missing')), { code: 'EXDEV' }, 'a missing name gets the table\'s noEntry')
})
