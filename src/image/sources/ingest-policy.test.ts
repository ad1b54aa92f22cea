import t from 'tap'
import { BadInputError, LimitExceededError } from '../../errors.js'
import { LayerPolicy, ingestContext, type RawEntry } from './ingest-policy.js'

const LAYER = 'tar img.tar, layer 1 of 1'

function raw (name: string, type: RawEntry['type'] = 'file', extra: Partial<RawEntry> = {}): RawEntry {
  return { name, type, mode: type === 'dir' ? 0o755 : 0o644, uid: 0, gid: 0, mtime: 1, size: 0, ...extra }
}

function policy (opts: Parameters<typeof ingestContext>[0] = {}): { p: LayerPolicy, warnings: string[] } {
  const warnings: string[] = []
  return { p: new LayerPolicy(LAYER, ingestContext({ warn: m => warnings.push(m), ...opts })), warnings }
}

t.test('LayerPolicy.admit() normalizes names and keeps metadata', async t => {
  const { p, warnings } = policy()
  t.same(p.admit(raw('./', 'dir')), { path: '', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 1, size: 0 })
  t.same(p.admit(raw('./usr//bin/', 'dir', { mode: 0o40755 })), { path: 'usr/bin', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 1, size: 0 }, 'mode masked to 0o7777')
  t.match(p.admit(raw('usr/bin/su', 'file', { mode: 0o4755, size: 3, uid: 7, gid: 8, mtime: -5 })), { path: 'usr/bin/su', mode: 0o4755, size: 3, uid: 7, gid: 8, mtime: -5 })
  t.match(p.admit(raw('dev/null', 'char', { devMajor: 1, devMinor: 3 })), { type: 'char', devMajor: 1, devMinor: 3 })
  t.match(p.admit(raw('x', 'file', { xattrs: new Map([['user.b', Buffer.from([0xff])], ['user.a', Buffer.from('v')]]) })), { xattrs: { 'user.a': 'dg==', 'user.b': '/w==' } })
  t.same(warnings, [])
})

t.test('LayerPolicy.admit() makes absolute names relative with a warning, and refuses them in strict mode', async t => {
  const { p, warnings } = policy()
  t.match(p.admit(raw('/etc/passwd'), 'at offset 9'), { path: 'etc/passwd' })
  t.same(warnings, [`${LAYER}: entry "/etc/passwd" at offset 9 has an absolute name; stored as "etc/passwd"`])
  t.match(p.admit(raw('/', 'dir')), { path: '' }, "umoci's '/' root is not worth a warning")
  t.equal(warnings.length, 1)
  const strict = policy({ strict: true })
  t.throws(() => strict.p.admit(raw('/etc/passwd'), 'at offset 9'), { name: 'BadInputError', message: /entry "\/etc\/passwd" at offset 9 has an absolute name.*refused in strict mode/ })
})

t.test('LayerPolicy.admit() refuses traversal and escaping links', async t => {
  const cases: Array<[string, RawEntry, RegExp]> = [
    ['..', raw('../etc/passwd'), /entry "\.\.\/etc\/passwd" is refused: the name contains a '\.\.' component/],
    ['inner ..', raw('a/../../x'), /contains a '\.\.' component/],
    ['NUL', raw('a\0b'), /NUL/],
    ['symlink escape', raw('a/b', 'symlink', { linkname: '../../etc/shadow' }), /symlink to "\.\.\/\.\.\/etc\/shadow", which climbs above the image root/],
    ['empty symlink', raw('s', 'symlink', { linkname: '' }), /empty target/],
    ['hardlink ..', raw('h', 'hardlink', { linkname: '../etc/shadow' }), /hardlink to "\.\.\/etc\/shadow", which is refused: the target contains a '\.\.'/],
    ['hardlink self', raw('h', 'hardlink', { linkname: './h' }), /hardlink to itself/],
    ['hardlink root', raw('h', 'hardlink', { linkname: '/' }), /hardlink to the image root/],
    ['root file', raw('./', 'file'), /file at the image root/]
  ]
  for (const [what, entry, message] of cases) {
    const { p } = policy()
    t.throws(() => p.admit(entry), { name: 'BadInputError', message }, what)
  }
  const { p } = policy()
  t.match(p.admit(raw('usr/lib/x', 'symlink', { linkname: '../../etc/x' })), { target: '../../etc/x' }, 'climbing to the root is fine')
  t.match(p.admit(raw('abs', 'symlink', { linkname: '/etc/shadow' })), { target: '/etc/shadow' }, 'absolute targets resolve inside the image')
})

t.test('LayerPolicy.admit() refuses entries written through a symlink or a file of the same layer', async t => {
  const { p } = policy()
  p.admit(raw('a', 'symlink', { linkname: '/etc' }))
  t.throws(() => p.admit(raw('a/passwd'), 'at offset 1024'), { name: 'BadInputError', message: `${LAYER}: entry "a/passwd" at offset 1024 lies below "a", a symlink of this layer (it would be written through the link)` })
  t.throws(() => p.admit(raw('a/x/y')), /lies below "a", a symlink/)
  t.throws(() => p.admit(raw('a/.wh.passwd')), /lies below "a", a symlink/, 'whiteouts too')
  t.throws(() => p.admit(raw('h', 'hardlink', { linkname: 'a/passwd' })), /hardlink to "a\/passwd", which lies below "a", a symlink of this layer/)
  p.admit(raw('f'))
  t.throws(() => p.admit(raw('f/g')), /lies below "f", which is not a directory in this layer/)
  p.admit(raw('d/child'))
  t.throws(() => p.admit(raw('d', 'symlink', { linkname: '/etc' })), /is a symlink, but earlier entries of the layer are inside it/)
  t.throws(() => p.admit(raw('h2', 'hardlink', { linkname: 'd' })), /hardlink to "d", a directory/)
})

t.test('LayerPolicy.admit() refuses duplicates and accepts hardlinks to earlier or lower entries', async t => {
  const { p } = policy()
  p.admit(raw('etc', 'dir'))
  p.admit(raw('etc/passwd'))
  t.throws(() => p.admit(raw('./etc/passwd')), { name: 'BadInputError', message: /entry "\.\/etc\/passwd" appears twice in the layer/ })
  t.match(p.admit(raw('etc/pw', 'hardlink', { linkname: '/etc/passwd' })), { type: 'hardlink', target: 'etc/passwd' })
  t.match(p.admit(raw('etc/lower', 'hardlink', { linkname: 'usr/bin/from-a-lower-layer' })), { target: 'usr/bin/from-a-lower-layer' })
})

t.test('LayerPolicy.admit() translates whiteout and opaque markers', async t => {
  const { p, warnings } = policy()
  p.admit(raw('etc', 'dir'))
  t.same(p.admit(raw('etc/.wh.old.conf')), { path: 'etc/old.conf', type: 'whiteout', mode: 0, uid: 0, gid: 0, mtime: 1, size: 0 })
  t.same(p.admit(raw('etc/.wh..wh..opq')), { path: 'etc', type: 'opaque', mode: 0, uid: 0, gid: 0, mtime: 1, size: 0 })
  t.match(p.admit(raw('.wh..wh..opq')), { path: '', type: 'opaque' })
  t.match(p.admit(raw('etc/old.conf')), { path: 'etc/old.conf', type: 'file' }, 'a whiteout and a new entry at one path may coexist')
  t.throws(() => p.admit(raw('etc/.wh.old.conf')), /appears twice/)
  t.throws(() => p.admit(raw('etc/.wh..wh..opq')), /appears twice/)
  t.throws(() => p.admit(raw('.wh.')), /whiteout marker without a valid name/)
  t.throws(() => p.admit(raw('x/.wh...')), /whiteout marker without a valid name/)
  t.equal(p.admit(raw('.wh..wh.plnk', 'dir')), undefined, 'aufs metadata is skipped')
  t.match(warnings, [/aufs metadata marker; skipped/])
  p.admit(raw('file'))
  t.throws(() => p.admit(raw('file/.wh..wh..opq')), /not a directory/)
})

t.test('LayerPolicy.admit() enforces entry size and count limits', async t => {
  const { p } = policy({ limits: { maxEntryBytes: 100, maxEntries: 3 } })
  p.admit(raw('a', 'file', { size: 100 }))
  t.throws(() => p.admit(raw('b', 'file', { size: 101 }), 'at offset 512'), { name: 'LimitExceededError', message: /entry "b" at offset 512 is 101 bytes, above the limit of 100/ })
  p.admit(raw('c'))
  t.throws(() => p.admit(raw('d')), LimitExceededError)
  t.throws(() => p.admit(raw('d')), /more than 3 entries \(at entry "d"\)/)
  const absurd = policy()
  t.throws(() => absurd.p.admit(raw('e', 'file', { size: 2 ** 60 })), BadInputError)
  t.throws(() => policy().p.admit(raw('e', 'symlink', { linkname: 'x', size: 3 })), /symlink with a non-zero size/)
  t.throws(() => policy().p.admit(raw('e', 'file', { uid: -1 })), /invalid uid/)
})
