import t from 'tap'
import { createHash } from 'node:crypto'
import { seededBytes } from '../../../fixtures/seeded-bytes.js'
import { OFF_THREAD_MIN_BYTES, streamHash } from './stream-hash.js'

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

t.test('streamHash() gives the sha256 of what was added, inline and on the worker, with hashes interleaved', async t => {
  const data = seededBytes('stream', 5 * 1024 * 1024 + 17)
  const other = seededBytes('other', 3 * 1024 * 1024)
  const big = streamHash(OFF_THREAD_MIN_BYTES) // on the worker
  const big2 = streamHash(OFF_THREAD_MIN_BYTES)
  const small = streamHash(1000) // inline
  const reused = new Uint8Array(300_001) // the caller's buffer, overwritten after each update()
  for (let at = 0, i = 0; at < data.length; i++) {
    const piece = reused.subarray(0, Math.min([1, 300_001, 65_536, 1024 * 1024 - 3][i % 4]!, reused.length, data.length - at))
    piece.set(data.subarray(at, at + piece.length))
    big.update(piece)
    small.update(piece)
    piece.fill(0xaa)
    at += piece.length
    if (i % 3 === 0) big2.update(other.subarray(0, 0))
  }
  big2.update(other)
  t.equal(await big.digest(), sha(data), 'worker')
  t.equal(await small.digest(), sha(data), 'inline')
  t.equal(await big2.digest(), sha(other), 'a second hash on the same worker')
  t.equal(await streamHash(OFF_THREAD_MIN_BYTES).digest(), sha(new Uint8Array(0)), 'nothing added')
  await t.rejects(big.digest(), /called twice/)
})

t.test('a dropped stream hash leaves the others intact', async t => {
  const a = streamHash(OFF_THREAD_MIN_BYTES)
  const b = streamHash(OFF_THREAD_MIN_BYTES)
  a.update(seededBytes('a', 2 * 1024 * 1024))
  b.update(seededBytes('b', 10))
  a.drop()
  a.drop()
  t.equal(await b.digest(), sha(seededBytes('b', 10)))
})
