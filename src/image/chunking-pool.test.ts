import t from 'tap'
import { createHash } from 'node:crypto'
import { seededBytes } from '../../fixtures/seeded-bytes.js'
import { FastCdcChunker, DEFAULT_FASTCDC_OPTIONS, chunkBuffer } from '../format/chunker.js'
import { ChunkingPool, NO_BYTES } from './chunking-pool.js'
import { decompress } from 'zstd-napi'

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

for (const workers of [0, 2]) {
  t.test(`ChunkingPool (workers: ${workers}) cuts each file on its own, whatever the pieces, and interleaved files do not mix`, async t => {
    const pool = new ChunkingPool({ workers })
    t.teardown(() => pool.close())
    const files = [seededBytes('a', 700_000), seededBytes('b', 5_000), seededBytes('c', 2_500_000), seededBytes('d', 0)]
    const expected = files.map(f => chunkBuffer(new FastCdcChunker(DEFAULT_FASTCDC_OPTIONS), f).map(sha))
    const results: Array<Array<Promise<Array<{ digest: string, length: number, compressed: Uint8Array }>>>> = files.map(() => [])
    // Interleave pieces of the files in odd sizes, as a tar of several layers would not, but a bug might.
    const offsets = files.map(() => 0)
    let step = 0
    while (offsets.some((o, i) => o < files[i]!.length)) {
      for (let i = 0; i < files.length; i++) {
        const size = [1, 4096, 70_001, 300_000][(step + i) % 4]!
        const o = offsets[i]!
        if (o >= files[i]!.length) continue
        results[i]!.push(pool.push(i, files[i]!.subarray(o, o + size), false))
        offsets[i] = o + size
      }
      step++
    }
    files.forEach((_, i) => results[i]!.push(pool.push(i, NO_BYTES, true)))
    pool.flush()
    for (let i = 0; i < files.length; i++) {
      const chunks = (await Promise.all(results[i]!)).flat()
      t.same(chunks.map(c => c.digest), expected[i], `file ${i}: same chunks as a one-shot FastCDC`)
      const joined = Buffer.concat(chunks.map(c => decompress(c.compressed)))
      t.ok(joined.equals(files[i]!), `file ${i}: frames decompress to the file`)
    }
  })
}

t.test('ChunkingPool.close() rejects what is pending and can be called twice', async t => {
  const pool = new ChunkingPool({ workers: 1 })
  const p = pool.push(1, seededBytes('x', 10_000), false)
  await pool.close()
  await pool.close()
  await t.rejects(p, /closed/)
  await t.rejects(pool.push(2, NO_BYTES, true), /closed/)
})
