import t from 'tap'
import { execFileSync } from 'node:child_process'
import { chmodSync, chownSync, constants, linkSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { lsetxattr, mknod } from '../../native.js'
import type { EntryHeader } from './image-source.js'
import { ZERO_DIFF_ID } from './image-source.js'
import { ingestContext } from './ingest-policy.js'
import { openDirectory } from './directory-source.js'

async function readTree (root: string, opts: Parameters<typeof ingestContext>[0] = {}): Promise<Array<EntryHeader & { content?: string }>> {
  const src = openDirectory(root, ingestContext(opts))
  const out = []
  for await (const { header, body } of src.layers[0]!.entries()) {
    if (body === undefined) { out.push(header); continue }
    const chunks: Buffer[] = []
    for await (const c of body) chunks.push(Buffer.from(c))
    out.push({ ...header, content: Buffer.concat(chunks).toString() })
  }
  if (src.layers[0]!.diffId() !== ZERO_DIFF_ID) throw new Error('a directory layer has the zero diff_id')
  return out
}

t.test('DirectoryLayerSource.entries() walks a tree in sorted order with every file type and its metadata', async t => {
  // A short path (not t.testdir()): a unix socket's path must fit in 108 bytes.
  const tree = mkdtempSync(join(tmpdir(), 'ld-'))
  t.teardown(() => rmSync(tree, { recursive: true }))
  mkdirSync(join(tree, 'b/sub'), { recursive: true })
  writeFileSync(join(tree, 'b/sub/file'), 'content')
  writeFileSync(join(tree, 'A'), '')
  writeFileSync(join(tree, 'a'), 'first')
  linkSync(join(tree, 'a'), join(tree, 'b/hard'))
  linkSync(join(tree, 'a'), join(tree, 'z-hard'))
  writeFileSync(join(tree, 'ä-名前'), 'unicode')
  symlinkSync('../a', join(tree, 'b/link'))
  mknod(join(tree, 'null'), constants.S_IFCHR | 0o666, 1, 3)
  chmodSync(join(tree, 'null'), 0o666) // mknod applies the umask
  mknod(join(tree, 'disk'), constants.S_IFBLK | 0o660, 259, 1_048_575)
  mknod(join(tree, 'fifo'), constants.S_IFIFO | 0o600, 0, 0)
  writeFileSync(join(tree, 'su'), 'x')
  chownSync(join(tree, 'su'), 1234, 5678) // before chmod: chown clears setuid
  chmodSync(join(tree, 'su'), 0o4755)
  execFileSync('touch', ['-d', '@-86400.5', join(tree, 'su')]) // utimes() in Node ignores negative times
  lsetxattr(join(tree, 'a'), 'user.bin', Buffer.from([0, 0xff, 0x80]))
  lsetxattr(join(tree, 'b'), 'user.dir', Buffer.from('d'))

  const server = createServer().listen(join(tree, 'sock'))
  await once(server, 'listening')
  t.teardown(() => { server.close() })

  const warnings: string[] = []
  const got = await readTree(tree, { warn: m => warnings.push(m) })
  t.same(got.map(e => e.path), ['', 'A', 'a', 'b', 'b/hard', 'b/link', 'b/sub', 'b/sub/file', 'disk', 'fifo', 'null', 'su', 'z-hard', 'ä-名前'],
    'names sorted by bytes, parents before children, socket skipped')
  t.match(warnings, [/directory .*ld-\w+, layer 1 of 1: "sock" is a socket; skipped/])
  const by = new Map(got.map(e => [e.path, e]))
  t.match(by.get('a'), { type: 'file', size: 5, content: 'first', xattrs: { 'user.bin': Buffer.from([0, 0xff, 0x80]).toString('base64') } })
  t.match(by.get('b/hard'), { type: 'hardlink', target: 'a', size: 0 }, 'hardlinks by (dev, ino) name the first path')
  t.equal(by.get('b/hard')?.xattrs, undefined)
  t.match(by.get('z-hard'), { type: 'hardlink', target: 'a' })
  t.match(by.get('b'), { type: 'dir', xattrs: { 'user.dir': 'ZA==' } })
  t.match(by.get('b/link'), { type: 'symlink', target: '../a' })
  t.match(by.get('null'), { type: 'char', devMajor: 1, devMinor: 3, mode: 0o666 })
  t.match(by.get('disk'), { type: 'block', devMajor: 259, devMinor: 1_048_575 })
  t.match(by.get('fifo'), { type: 'fifo', mode: 0o600 })
  t.match(by.get('su'), { type: 'file', mode: 0o4755, uid: 1234, gid: 5678, mtime: -86_401 }, 'mtime is floored to whole seconds')
  t.match(by.get('ä-名前'), { content: 'unicode' })
})

t.test('DirectoryLayerSource.entries() applies the ingest policy', async t => {
  const root = t.testdir({ tree: { etc: {} } })
  symlinkSync('../../../etc/shadow', join(root, 'tree', 'etc', 'escape'))
  await t.rejects(readTree(join(root, 'tree')), { name: 'BadInputError', message: /directory .*tree, layer 1 of 1: entry "etc\/escape" is a symlink to "\.\.\/\.\.\/\.\.\/etc\/shadow", which climbs above the image root/ })

  const latin1 = t.testdir({ tree: {} })
  writeFileSync(Buffer.from(`${join(latin1, 'tree')}/caf\xe9`, 'latin1'), 'x')
  await t.rejects(readTree(join(latin1, 'tree')), { name: 'BadInputError', message: /holds a name that is not valid UTF-8 \(636166e9\)/ })

  const wh = t.testdir({ tree: { '.wh.gone': '', d: { '.wh..wh..opq': '' } } })
  t.match(await readTree(join(wh, 'tree')), [{ path: '' }, { path: 'gone', type: 'whiteout' }, { path: 'd', type: 'dir' }, { path: 'd', type: 'opaque' }])
})

t.test('DirectoryLayerSource.entries() refuses a file that changes size while it is read', async t => {
  const root = t.testdir({ tree: { big: 'x'.repeat(100_000) } })
  const src = openDirectory(join(root, 'tree'), ingestContext())
  await t.rejects((async () => {
    for await (const { header, body } of src.layers[0]!.entries()) {
      if (header.path !== 'big' || body === undefined) continue
      truncateSync(join(root, 'tree', 'big'), 10)
      for await (const _ of body) { /* read */ }
    }
  })(), { name: 'BadInputError', message: /"big": shrank from 100000 to 10 bytes while being read/ })
})

t.test('DirectoryLayerSource.entries() records mount points as empty directories', async t => {
  // Not in t.testdir(): its removal must not race the unmount.
  const root = mkdtempSync(join(tmpdir(), 'layerd-mnt-'))
  mkdirSync(join(root, 'tree', 'mnt'), { recursive: true })
  writeFileSync(join(root, 'tree', 'after'), 'a')
  const mnt = join(root, 'tree', 'mnt')
  execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', mnt])
  t.teardown(() => {
    execFileSync('umount', [mnt])
    rmSync(root, { recursive: true })
  })
  writeFileSync(join(mnt, 'inside'), 'x')
  const warnings: string[] = []
  t.same((await readTree(join(root, 'tree'), { warn: m => warnings.push(m) })).map(e => e.path), ['', 'after', 'mnt'])
  t.match(warnings, [/"mnt" is a mount point; recorded as an empty directory/])
  await t.rejects(readTree(join(root, 'tree'), { strict: true }), { name: 'BadInputError', message: /mount point.*refused in strict mode/ })
})
