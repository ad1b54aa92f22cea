import t from 'tap'
import { createHash } from 'node:crypto'
import { UsageError } from '../errors.js'
import {
  type Chunker, type FastCdcOptions, DEFAULT_FASTCDC_OPTIONS, FastCdcChunker, FixedSizeChunker, GEAR_TABLE, chunkBuffer
} from './chunker.js'

/** xorshift32 bytes: a seeded pseudo-random input that is the same on every machine. */
function seededBytes (length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length)
  let x = seed | 0
  for (let i = 0; i < length; i++) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5
    out[i] = x & 0xff
  }
  return out
}

/** Feed `data` to `chunker` in pieces of the sizes `nextSize()` returns; all chunks, copied out. */
function chunkInPieces (chunker: Chunker, data: Uint8Array, nextSize: () => number): Uint8Array[] {
  const chunks: Uint8Array[] = []
  for (let at = 0; at < data.length;) {
    const end = Math.min(data.length, at + Math.max(1, nextSize()))
    for (const c of chunker.push(data.subarray(at, end))) chunks.push(c.slice())
    at = end
  }
  const last = chunker.flush()
  if (last !== undefined) chunks.push(last.slice())
  return chunks
}

function lengths (chunks: Uint8Array[]): number[] {
  return chunks.map(c => c.length)
}

/** sha256 over each chunk's length and sha256: one hex string that pins a whole chunk list. */
function chunkListDigest (chunks: Uint8Array[]): string {
  const h = createHash('sha256')
  for (const c of chunks) h.update(`${c.length}:${createHash('sha256').update(c).digest('hex')}\n`)
  return h.digest('hex')
}

const KIB = 1024
const OPTS_16K: FastCdcOptions = { minSize: 4 * KIB, avgSize: 16 * KIB, maxSize: 64 * KIB }
const OPTS_32K: FastCdcOptions = { minSize: 8 * KIB, avgSize: 32 * KIB, maxSize: 128 * KIB }
const OPTS_64K: FastCdcOptions = { minSize: 16 * KIB, avgSize: 64 * KIB, maxSize: 256 * KIB }

t.test('GEAR_TABLE is the pinned SplitMix64-derived table', async t => {
  t.equal(GEAR_TABLE.length, 256)
  // Digest of the table as little-endian uint32s, cross-checked against an independent Python SplitMix64.
  const le = new DataView(new ArrayBuffer(1024))
  GEAR_TABLE.forEach((v, i) => le.setInt32(i * 4, v, true))
  t.equal(createHash('sha256').update(new Uint8Array(le.buffer)).digest('hex'),
    '797f79163d274f9f1b679bc1ef7345593c8985d818aef29520aac131f50ee6fb')
  t.equal((GEAR_TABLE[0]! >>> 0).toString(16), 'da16f78c')
  t.equal(new Set(GEAR_TABLE).size, 256, 'entries are distinct')
})

t.test('FastCdcChunker.push() cuts the same chunks however the input is split', async t => {
  const data = seededBytes(2 * 1024 * KIB, 0x1234567)
  const whole = chunkBuffer(new FastCdcChunker(OPTS_16K), data).map(c => c.slice())
  t.ok(whole.length > 50, `enough chunks to mean something (${whole.length})`)
  const expected = lengths(whole)
  t.same(lengths(chunkInPieces(new FastCdcChunker(OPTS_16K), data, () => 1)), expected, '1-byte pieces')
  t.same(lengths(chunkInPieces(new FastCdcChunker(OPTS_16K), data, () => 4 * KIB)), expected, '4 KiB pieces')
  const rnd = seededBytes(100000, 99)
  let k = 0
  const random = chunkInPieces(new FastCdcChunker(OPTS_16K), data, () => (rnd[k++ % rnd.length]! * 331) % (70 * KIB))
  t.same(lengths(random), expected, 'random-size pieces')
  t.equal(chunkListDigest(random), chunkListDigest(whole), 'same bytes, not only same lengths')
  t.same(Buffer.concat(whole), Buffer.from(data), 'chunks concatenate to the input')
})

t.test('FastCdcChunker.push() respects minSize and maxSize', async t => {
  const random = chunkBuffer(new FastCdcChunker(OPTS_16K), seededBytes(4 * 1024 * KIB, 7))
  for (const c of random.slice(0, -1)) {
    if (c.length <= OPTS_16K.minSize || c.length > OPTS_16K.maxSize) t.fail(`chunk of ${c.length} bytes out of range`)
  }
  t.ok(random.at(-1)!.length <= OPTS_16K.maxSize)
  // Constant input never matches the mask, so every cut is forced at maxSize.
  const zeros = chunkBuffer(new FastCdcChunker(OPTS_16K), new Uint8Array(1000 * KIB))
  t.same(lengths(zeros), [...Array(15).fill(64 * KIB), 1000 * KIB - 15 * 64 * KIB])
})

t.test('FastCdcChunker.push() resynchronizes after a local edit', async t => {
  const original = seededBytes(8 * 1024 * KIB, 42)
  const edited = new Uint8Array(original.length + 10)
  const at = 4 * 1024 * KIB + 123
  edited.set(original.subarray(0, at))
  edited.set(seededBytes(110, 5), at) // replace 100 bytes with 110 new ones
  edited.set(original.subarray(at + 100), at + 110)
  const before = chunkBuffer(new FastCdcChunker(OPTS_16K), original).map(c => createHash('sha256').update(c).digest('hex'))
  const after = chunkBuffer(new FastCdcChunker(OPTS_16K), edited).map(c => createHash('sha256').update(c).digest('hex'))
  const old = new Set(before)
  const fresh = after.filter(d => !old.has(d))
  t.ok(fresh.length >= 1 && fresh.length <= 3, `only chunks near the edit change (${fresh.length} new of ${after.length})`)
  t.ok(Math.abs(before.length - after.length) <= 1)
})

t.test('FastCdcChunker cuts pinned chunks for a seeded pseudo-random input', async t => {
  // If these change, chunk boundaries changed: stored images stop deduplicating against new pushes.
  // The digests were cross-checked against an independent Python implementation of the same spec.
  t.same(DEFAULT_FASTCDC_OPTIONS, OPTS_32K, 'the sizes push uses are among the pinned ones')
  const data = seededBytes(4 * 1024 * KIB, 0x5eed)
  const pins: Array<[FastCdcOptions, number, string]> = [
    [OPTS_16K, 221, '42125254c0af23ae2c916edd550ccaaed6c4fc39b5ca27995bdfabad8d554d96'],
    [OPTS_32K, 111, '9b73ff3150f82d34842b666b341a332156bc48c70126d36675c0563948e24fc2'],
    [OPTS_64K, 55, 'b8335d12603dd1e11d099e7bbe276d6b62a0dd4c5222ba4a92e85e523f158c46']
  ]
  for (const [opts, count, digest] of pins) {
    const chunks = chunkBuffer(new FastCdcChunker(opts), data)
    t.equal(chunks.length, count, `chunk count for avgSize ${opts.avgSize}`)
    t.equal(chunkListDigest(chunks), digest, `chunk list digest for avgSize ${opts.avgSize}`)
  }
})

/** The spec, written as plainly as possible: the optimized streaming chunker must agree with it. */
function referenceCutLengths (data: Uint8Array, { minSize, avgSize, maxSize }: FastCdcOptions): number[] {
  const bits = Math.log2(avgSize)
  const top = (n: number): number => Number(((1n << BigInt(n)) - 1n) << BigInt(32 - n))
  const hard = top(bits + 2)
  const easy = top(bits - 2)
  const out: number[] = []
  for (let start = 0; start < data.length;) {
    const end = Math.min(data.length - start, maxSize)
    let cut = end
    let h = 0
    for (let p = minSize; p < end; p++) {
      h = (h * 2 + (GEAR_TABLE[data[start + p]!]! >>> 0)) % 2 ** 32
      if ((h & (p < avgSize ? hard : easy)) === 0) { cut = p + 1; break }
    }
    out.push(cut)
    start += cut
  }
  return out
}

t.test('FastCdcChunker agrees with a plain reference implementation', async t => {
  const opts: FastCdcOptions[] = [OPTS_16K, OPTS_32K, { minSize: 64, avgSize: 256, maxSize: 1024 }, { minSize: 1000, avgSize: 2048, maxSize: 3000 }]
  for (const o of opts) {
    for (const seed of [1, 2, 3]) {
      const data = seededBytes(1024 * KIB + seed * 777, seed)
      t.same(lengths(chunkBuffer(new FastCdcChunker(o), data)), referenceCutLengths(data, o), `avgSize ${o.avgSize}, seed ${seed}`)
    }
  }
})

t.test('FastCdcChunker chunks average near avgSize on random data', async t => {
  const data = seededBytes(16 * 1024 * KIB, 0xabcdef)
  for (const opts of [OPTS_16K, OPTS_64K]) {
    const chunks = chunkBuffer(new FastCdcChunker(opts), data)
    const mean = data.length / chunks.length
    t.ok(mean >= 0.9 * opts.avgSize && mean <= 1.3 * opts.avgSize, `mean ${Math.round(mean)} for avgSize ${opts.avgSize}`)
  }
})

t.test('FastCdcChunker.push() returns views of the input for chunks inside one push', async t => {
  const data = seededBytes(512 * KIB, 3)
  const chunker = new FastCdcChunker(OPTS_16K)
  const chunks = chunker.push(data)
  t.ok(chunks.length > 1)
  t.ok(chunks.every(c => c.buffer === data.buffer), 'no copies')
  t.equal(chunker.flush()!.buffer, data.buffer)
  t.equal(chunker.flush(), undefined, 'flush resets')
  t.same(chunker.push(new Uint8Array(0)), [])
  t.same(lengths(chunkBuffer(chunker, data)), lengths(chunks).concat(data.length - chunks.reduce((s, c) => s + c.length, 0)),
    'a flushed chunker starts a fresh stream')
})

for (const [name, make] of [['FastCdcChunker', () => new FastCdcChunker(OPTS_16K)], ['FixedSizeChunker', () => new FixedSizeChunker(40 * KIB)]] as const) {
  t.test(`${name}.detach() lets the caller overwrite the buffers it pushed`, async t => {
    const data = seededBytes(700 * KIB, 11)
    const expected = chunkInPieces(make(), data, () => 7 * KIB)
    const chunker: Chunker = make()
    const reused = new Uint8Array(7 * KIB) // one buffer for every piece, as the push workers reuse theirs
    const got: Uint8Array[] = []
    for (let at = 0; at < data.length; at += reused.length) {
      const piece = reused.subarray(0, Math.min(reused.length, data.length - at))
      piece.set(data.subarray(at, at + piece.length))
      for (const c of chunker.push(piece)) got.push(c.slice())
      chunker.detach()
      reused.fill(0xee) // what the next piece would do to a view the chunker kept
    }
    const last = chunker.flush()
    if (last !== undefined) got.push(last.slice())
    t.equal(chunkListDigest(got), chunkListDigest(expected), 'same chunks, same bytes')
    t.ok(got.length > 10)
  })
}

t.test('FastCdcChunker constructor rejects sizes that cannot work', async t => {
  t.throws(() => new FastCdcChunker({ minSize: 4096, avgSize: 10000, maxSize: 65536 }), UsageError)
  t.throws(() => new FastCdcChunker({ minSize: 32, avgSize: 1024, maxSize: 4096 }), /64 <= min < avg < max/)
  t.throws(() => new FastCdcChunker({ minSize: 4096, avgSize: 4096, maxSize: 65536 }), UsageError)
  t.throws(() => new FastCdcChunker({ minSize: 4096, avgSize: 16384, maxSize: 8192 }), UsageError)
  t.throws(() => new FastCdcChunker({ minSize: 4096.5, avgSize: 16384, maxSize: 65536 }), /integers/)
})

t.test('FixedSizeChunker.push() cuts every size bytes however the input is split', async t => {
  const data = seededBytes(300 * KIB + 7, 11)
  const expected = [...Array(4).fill(64 * KIB), 300 * KIB + 7 - 4 * 64 * KIB]
  t.same(lengths(chunkBuffer(new FixedSizeChunker(64 * KIB), data)), expected)
  t.same(lengths(chunkInPieces(new FixedSizeChunker(64 * KIB), data, () => 1000)), expected)
  t.same(lengths(chunkInPieces(new FixedSizeChunker(64 * KIB), data, () => 64 * KIB)), expected)
  t.same(Buffer.concat(chunkInPieces(new FixedSizeChunker(64 * KIB), data, () => 5000)), Buffer.from(data))
  t.equal(new FixedSizeChunker(10).flush(), undefined)
  t.throws(() => new FixedSizeChunker(0), UsageError)
})
