import t from 'tap'
import { createHash } from 'node:crypto'
import { CorruptObjectError } from '../errors.js'
import { TOC_VERSION, decodeToc, encodeToc, resolveChunk, type LayerToc } from './toc.js'

const hex = (c: string): string => c.repeat(64)
/** Every entry kind and optional field, with fixed values. */
const TOC: LayerToc = {
  diffId: `sha256:${hex('d')}`,
  blobs: [hex('b'), hex('c')],
  chunks: [
    { digest: hex('1'), blob: 0, offset: 0, compressedLength: 10, length: 20 },
    { digest: hex('2'), blob: 1, offset: 40, compressedLength: 5, length: 7 }
  ],
  entries: [
    { path: '', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 1_704_067_200, size: 0 },
    { path: 'bin/ping', type: 'file', mode: 0o4755, uid: 0, gid: 0, mtime: 1_704_067_200, size: 27, xattrs: { 'user.z': 'eg==', 'security.capability': 'AQAAAg==' }, spans: [{ chunk: 0, offset: 0, length: 20 }, { chunk: 1, offset: 0, length: 7 }] },
    { path: 'bin/sh', type: 'symlink', mode: 0o777, uid: 0, gid: 0, mtime: -5, size: 0, target: 'dash' },
    { path: 'bin/ping2', type: 'hardlink', mode: 0o4755, uid: 0, gid: 0, mtime: 1_704_067_200, size: 0, target: 'bin/ping' },
    { path: 'dev/null', type: 'char', mode: 0o666, uid: 0, gid: 0, mtime: 0, size: 0, devMajor: 1, devMinor: 3 },
    { path: 'run/fifo', type: 'fifo', mode: 0o644, uid: 1000, gid: 1000, mtime: 0, size: 0 },
    { path: 'etc/gone', type: 'whiteout', mode: 0, uid: 0, gid: 0, mtime: 0, size: 0 },
    { path: 'var/cache', type: 'opaque', mode: 0, uid: 0, gid: 0, mtime: 0, size: 0 }
  ]
}

t.test('encodeToc() bytes are pinned (a change is a format change: TOC_VERSION)', async t => {
  const bytes = encodeToc(TOC)
  t.equal(TOC_VERSION, 1)
  t.equal(createHash('sha256').update(bytes).digest('hex'), '536a561727e62efbae5f089700924af5460482851c30bd99b2739052b76c2b26')
  t.equal(new TextDecoder().decode(bytes).slice(0, 48), '{"v":1,"diffId":"sha256:dddddddddddddddddddddddd', 'the version comes first')
  const reordered = { ...TOC, entries: TOC.entries.map(e => e.xattrs === undefined ? e : { ...e, xattrs: { 'security.capability': 'AQAAAg==', 'user.z': 'eg==' } }) }
  t.same(encodeToc(reordered), bytes, 'xattrs are written sorted: equal TOCs, equal bytes')
})

t.test('decodeToc() reads back what encodeToc() wrote', async t => {
  t.same(decodeToc(encodeToc(TOC), 'layers/x'), TOC)
})

t.test('decodeToc() refuses malformed TOCs with CorruptObjectError naming the object and the problem', async t => {
  const doc = JSON.parse(new TextDecoder().decode(encodeToc(TOC)))
  const bad = (mutate: (d: any) => void): Uint8Array => { const d = structuredClone(doc); mutate(d); return new TextEncoder().encode(JSON.stringify(d)) }
  const cases: Array<[string, Uint8Array, RegExp]> = [
    ['not JSON', new TextEncoder().encode('{'), /layer TOC layers\/x is not valid JSON/],
    ['another version', bad(d => { d.v = 2 }), /unsupported version 2/],
    ['a bad diffId', bad(d => { d.diffId = 'md5:1' }), /diffId is not a sha256 digest/],
    ['a chunk in a missing blob', bad(d => { d.chunks[1][1] = 9 }), /chunk 1 names blob 9, which does not exist/],
    ['an unknown type', bad(d => { d.entries[5].t = 'q' }), /entry 5 has unknown type "q"/],
    ['a .. path', bad(d => { d.entries[5].p = 'a/../b' }), /entry 5 has an invalid path/],
    ['a mode over 0o7777', bad(d => { d.entries[1].m = 0o10000 }), /entry "bin\/ping" has an invalid mode/],
    ['spans that do not add up', bad(d => { d.entries[1].s = 28 }), /spans totalling 27 bytes but a size of 28/],
    ['a span outside its chunk', bad(d => { d.entries[1].c[2] = 21 }), /a span outside chunk 0/],
    ['a symlink without target', bad(d => { delete d.entries[2].l }), /entry "bin\/sh" has no link target/],
    ['a hardlink to a non-normalized path', bad(d => { d.entries[3].l = '/bin/ping' }), /hardlink target that is not a normalized path/],
    ['a size on a directory', bad(d => { d.entries[0].s = 1 }), /entry "" has an invalid size/]
  ]
  for (const [what, bytes, message] of cases) t.throws(() => decodeToc(bytes, 'layers/x'), { constructor: CorruptObjectError, message }, what)
})

t.test('resolveChunk() gives a chunk with its blob digest', async t => {
  t.same(resolveChunk(TOC, 1), { digest: hex('2'), blob: hex('c'), offset: 40, compressedLength: 5, length: 7 })
})
