import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { compress } from 'zstd-napi'
import { CorruptObjectError } from '../errors.js'
import { decodeChunk } from './chunk-decoder.js'

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')
const STORE = 'memory://decoder-test'

function frameOf (plain: Buffer): { frame: Buffer, ref: { digest: string, blob: string, offset: number, compressedLength: number, length: number } } {
  const frame = compress(plain)
  return { frame, ref: { digest: sha(plain), blob: 'b'.repeat(64), offset: 0, compressedLength: frame.length, length: plain.length } }
}

t.test('decodeChunk() returns the plain bytes of a good frame', async t => {
  const plain = Buffer.concat([randomBytes(3000), Buffer.alloc(5000)])
  const { frame, ref } = frameOf(plain)
  t.ok(decodeChunk(frame, ref, STORE).equals(plain))
  const empty = frameOf(Buffer.alloc(0))
  t.equal(decodeChunk(empty.frame, empty.ref, STORE).length, 0, 'an empty chunk')
})

t.test('decodeChunk() throws CorruptObjectError for every kind of bad frame', async t => {
  const plain = randomBytes(4096)
  const { frame, ref } = frameOf(plain)
  t.throws(() => decodeChunk(frame, { ...ref, digest: sha(Buffer.from('other')) }, STORE), CorruptObjectError, 'wrong sha256')
  t.throws(() => decodeChunk(frame, { ...ref, length: ref.length - 1 }, STORE), CorruptObjectError, 'frame bigger than the TOC says: refused, not allocated')
  t.throws(() => decodeChunk(frame, { ...ref, length: ref.length + 1 }, STORE), CorruptObjectError, 'frame smaller than the TOC says')
  t.throws(() => decodeChunk(Buffer.alloc(frame.length, 7), ref, STORE), CorruptObjectError, 'not zstd')
  t.throws(() => decodeChunk(frame.subarray(0, frame.length - 4), ref, STORE), CorruptObjectError, 'truncated')
  t.throws(() => decodeChunk(frame, { ...ref, length: 2 ** 40 }, STORE), CorruptObjectError, 'absurd size')
  const err = t.throws(() => decodeChunk(frame, { ...ref, digest: sha(Buffer.from('x')) }, STORE)) as Error
  t.match(err.message, ref.blob)
  t.match(err.message, STORE)
})
