import t from 'tap'
import { Compressor } from 'zstd-napi'
import { encodeStoredFrame, StoredChunkDecoder } from './stored-chunk.js'

const compressor = new Compressor()
const text = (s: string): Buffer => Buffer.from(s.repeat(2000))

t.test('encodeStoredFrame() keeps a frame only when it is smaller than the plain bytes', async t => {
  const plain = text('abc')
  t.ok(encodeStoredFrame(plain, compressor.compress(plain))!.length < plain.length, 'compressible: a frame')
  const random = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 2654435761) >>> 24))
  t.equal(encodeStoredFrame(random, Buffer.alloc(random.length)), undefined, 'a frame as big as the plain bytes: not kept')
  t.equal(encodeStoredFrame(plain, undefined), undefined, 'no frame given')
})

t.test('StoredChunkDecoder.decode() returns the plain bytes and keeps a chunk from its second decode on', async t => {
  const a = text('layerd ')
  const stored = encodeStoredFrame(a, compressor.compress(a))!
  const d = new StoredChunkDecoder()
  t.ok(d.decode('a', stored)?.equals(a))
  t.equal(d.decodedBytes, 0, 'decoded once: not kept (a full read of a tree keeps nothing)')
  t.ok(d.decode('a', stored)?.equals(a))
  t.equal(d.decodedBytes, a.length, 'decoded twice: kept')
  t.ok(d.decode('a', stored)?.equals(a))
  t.match({ decompressed: d.decompressed, reused: d.reused }, { decompressed: 2, reused: 1 })
})

t.test('StoredChunkDecoder keeps at most capBytes of decoded chunks, least recently used out first', async t => {
  const a = text('aaaa'); const b = text('bbbb'); const c = text('cccc')
  const sa = encodeStoredFrame(a, compressor.compress(a))!
  const sb = encodeStoredFrame(b, compressor.compress(b))!
  const sc = encodeStoredFrame(c, compressor.compress(c))!
  const d = new StoredChunkDecoder(a.length * 2)
  for (const [k, v] of [['a', sa], ['b', sb], ['c', sc]] as const) d.decode(k, v) // seen once each: none kept
  d.decode('a', sa); d.decode('b', sb); d.decode('a', sa) // a and b kept, a the most recent
  d.decode('c', sc) // c kept, evicting b
  t.equal(d.decodedBytes, a.length * 2, 'within the cap')
  const before = d.decompressed
  t.ok(d.decode('a', sa)?.equals(a), 'a kept')
  t.equal(d.decompressed, before, 'a served without decompressing')
  t.ok(d.decode('b', sb)?.equals(b), 'b decoded again')
  t.equal(d.decompressed, before + 1, 'b had been dropped')
  t.ok(d.decode('c', sc)?.equals(c), 'the scratch buffer b used does not hold c: c is kept')
  const none = new StoredChunkDecoder(0)
  none.decode('a', sa); none.decode('a', sa)
  t.equal(none.decompressed, 2, 'a cap of 0 keeps nothing')
})

t.test('StoredChunkDecoder.decode() reads a damaged value as undefined', async t => {
  const a = text('x')
  const stored = encodeStoredFrame(a, compressor.compress(a))!
  stored.fill(0x55, 4)
  const d = new StoredChunkDecoder()
  t.equal(d.decode('a', stored), undefined)
  t.equal(d.decode('b', Buffer.alloc(2)), undefined, 'too short')
  const huge = Buffer.from(stored); huge.writeUInt32LE(0xffffffff, 0)
  t.equal(d.decode('c', huge), undefined, 'a damaged length over the chunk limit: nothing allocated')
  t.equal(d.failed, 3)
})

t.test('StoredChunkDecoder.release() drops every kept chunk; a later decode still returns the right bytes', async t => {
  const a = text('release ')
  const sa = encodeStoredFrame(a, compressor.compress(a))!
  const d = new StoredChunkDecoder()
  d.decode('a', sa); d.decode('a', sa)
  t.equal(d.decodedBytes, a.length, 'kept before release')
  t.equal(d.release(), a.length, 'reports the bytes it dropped')
  t.equal(d.decodedBytes, 0)
  const before = d.decompressed
  t.ok(d.decode('a', sa)?.equals(a), 'decodes again after release')
  t.equal(d.decompressed, before + 1, 'by decompressing: nothing was kept')
  t.equal(d.decodedBytes, 0, 'and the once-decoded digests were forgotten too: not kept on the first decode after release')
})

t.test('StoredChunkDecoder.capBytes lowered evicts at once, least recently used first; raised keeps more again', async t => {
  const [a, b] = [text('aaaa'), text('bbbb')]
  const [sa, sb] = [encodeStoredFrame(a, compressor.compress(a))!, encodeStoredFrame(b, compressor.compress(b))!]
  const d = new StoredChunkDecoder(a.length * 4)
  for (let i = 0; i < 2; i++) { d.decode('a', sa); d.decode('b', sb) }
  t.equal(d.decodedBytes, a.length * 2, 'both kept under the first cap')
  d.capBytes = a.length
  t.equal(d.decodedBytes, a.length, 'one chunk left under the lower cap')
  const before = d.decompressed
  t.ok(d.decode('b', sb)?.equals(b), 'b, the most recent, is the one kept')
  t.equal(d.decompressed, before, 'b served without decompressing')
  d.capBytes = a.length * 4
  d.decode('a', sa); d.decode('a', sa) // evicted, so seen once again first
  t.equal(d.decodedBytes, a.length * 2, 'a kept again once the cap is raised')
})
