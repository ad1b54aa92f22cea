import t from 'tap'
import { CorruptObjectError } from '../errors.js'
import { contentEntries, decodeTarSplit, encodeTarSplit, mismatchWithToc, TarSplitBuilder, type TarSplit } from './tar-split.js'
import type { LayerToc } from './toc.js'

const split: TarSplit = { holes: [5, 70_000], raw: [Buffer.from('header-a'), Buffer.alloc(0), Buffer.from('padding and the end')] }
const toc: LayerToc = {
  diffId: `sha256:${'1'.repeat(64)}`,
  blobs: [],
  chunks: [],
  entries: [
    { path: '', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 0, size: 0 },
    { path: 'a', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, size: 5 },
    { path: 'empty', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, size: 0 },
    { path: 'b', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, size: 70_000 }
  ]
}

t.test('encodeTarSplit and decodeTarSplit round-trip a split', async t => {
  const back = decodeTarSplit(encodeTarSplit(split), 'test')
  t.same(back.holes, split.holes)
  t.same(back.raw.map(r => Buffer.from(r).toString()), split.raw.map(r => Buffer.from(r).toString()))
  t.throws(() => encodeTarSplit({ holes: [1], raw: [Buffer.alloc(1)] }), RangeError, 'a raw run too few is a bug')
})

t.test('decodeTarSplit refuses every inconsistent input with the object named', async t => {
  const good = encodeTarSplit(split)
  const withLength = (i: number, v: number): Buffer => { const b = Buffer.from(good); b.writeDoubleLE(v, 14 + 8 * i); return b }
  const cases: Array<[string, Uint8Array, RegExp]> = [
    ['bad magic', Buffer.concat([Buffer.from('NOTSPLIT1\n'), good.subarray(10)]), /bad magic/],
    ['truncated lengths', good.subarray(0, 20), /too short for 2 holes/],
    ['raw bytes missing', good.subarray(0, good.length - 1), /the lengths name 27 raw bytes, but 26 follow/],
    ['raw bytes extra', Buffer.concat([good, Buffer.from('x')]), /but 28 follow/],
    ['an empty hole', withLength(1, 0), /length 1 is 0/],
    ['a fractional length', withLength(0, 1.5), /length 0 is 1.5/],
    ['a negative length', withLength(2, -8), /length 2 is -8/]
  ]
  for (const [what, bytes, message] of cases) {
    let err: unknown
    try { decodeTarSplit(bytes, 'tar-splits/x in store') } catch (e) { err = e }
    t.ok(err instanceof CorruptObjectError, `${what}: CorruptObjectError`)
    t.match((err as Error | undefined)?.message, /^tar split tar-splits\/x in store is invalid: /, `${what}: names the object`)
    t.match((err as Error | undefined)?.message, message, `${what}: says why`)
  }
})

t.test('mismatchWithToc pairs holes with the TOC\'s files that have content, in order', async t => {
  t.same(contentEntries(toc).map(e => e.path), ['a', 'b'], 'the empty file and the directory have no hole')
  t.equal(mismatchWithToc(split, toc), undefined)
  t.match(mismatchWithToc({ ...split, holes: [5, 69_999] }, toc), 'hole 1 is 69999 bytes, but "b" is 70000')
  t.match(mismatchWithToc({ holes: [5], raw: [Buffer.alloc(0), Buffer.alloc(0)] }, toc), 'it has 1 content holes, the TOC 2 files with content')
})

t.test('TarSplitBuilder keeps raw bytes as copies, and gives up past its bound', async t => {
  const b = new TarSplitBuilder(16)
  const reused = Buffer.from('abcd')
  b.raw(reused)
  reused.fill(0x21) // the caller reuses its buffer
  b.hole(100)
  b.raw(Buffer.from('ef'))
  b.raw(Buffer.from('gh'))
  const r = b.result()!
  t.same(r.holes, [100])
  t.same(r.raw.map(x => Buffer.from(x).toString()), ['abcd', 'efgh'])
  b.raw(Buffer.alloc(9))
  t.equal(b.result(), undefined, 'over 16 raw bytes: no split')
  t.equal(b.gaveUp, true)
})
