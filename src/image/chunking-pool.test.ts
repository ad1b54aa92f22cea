import t from 'tap'
import { createHash } from 'node:crypto'
import { seededBytes } from '../../fixtures/seeded-bytes.js'
import { FastCdcChunker, DEFAULT_FASTCDC_OPTIONS, chunkBuffer } from '../format/chunker.js'
import { ELF_MAGIC, type LargeElfChunking } from '../format/file-chunkers.js'
import { ChunkingPool, DEFAULT_CHUNKING, NO_BYTES } from './chunking-pool.js'
import { MAX_FILE_BY_PATH_BYTES } from './file-chunking.js'
import { decompress } from 'zstd-napi'
import { symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

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
        results[i]!.push(pool.push(i, files[i]!.subarray(o, o + size), false, files[i]!.length))
        offsets[i] = o + size
      }
      step++
    }
    files.forEach((_, i) => results[i]!.push(pool.push(i, NO_BYTES, true, files[i]!.length)))
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
  const p = pool.push(1, seededBytes('x', 10_000), false, 20_000)
  await pool.close()
  await pool.close()
  await t.rejects(p, /closed/)
  await t.rejects(pool.push(2, NO_BYTES, true, 0), /closed/)
})

for (const workers of [0, 2]) {
  t.test(`ChunkingPool (workers: ${workers}).pushFile() reads a file itself, and a file that is not as the walk saw it fails alone`, async t => {
    const pool = new ChunkingPool({ workers })
    t.teardown(() => pool.close())
    const d = t.testdir()
    const good = [1, 5_000, 700_000, MAX_FILE_BY_PATH_BYTES].map((size, i) => {
      const bytes = seededBytes(`f${i}`, size)
      const path = join(d, `good-${i}`)
      writeFileSync(path, bytes)
      return { bytes, path, size }
    })
    writeFileSync(join(d, 'shrank'), seededBytes('s', 100))
    writeFileSync(join(d, 'grew'), seededBytes('g', 300))
    symlinkSync(good[1]!.path, join(d, 'now-a-link'))
    const bad = [
      { path: join(d, 'shrank'), size: 200, error: /^file shrank: shrank from 200 to 100 bytes while being read$/ },
      { path: join(d, 'grew'), size: 200, error: /^file grew: grew beyond 200 bytes while being read$/ },
      { path: join(d, 'now-a-link'), size: 5_000, error: /^file now-a-link: cannot open: .*ELOOP/ },
      { path: join(d, 'gone'), size: 10, error: /^file gone: cannot open: .*ENOENT/ }
    ]
    // Good and bad files alternate, so they share batches.
    const goodResults = []
    const badResults = []
    for (let i = 0; i < good.length; i++) {
      goodResults.push(pool.pushFile(2 * i, { path: good[i]!.path, size: good[i]!.size, label: `file good-${i}` }))
      const b = bad[i]!
      badResults.push(pool.pushFile(2 * i + 1, { path: b.path, size: b.size, label: `file ${b.path.slice(d.length + 1)}` }))
    }
    pool.flush()
    for (const [i, g] of good.entries()) {
      const chunks = await goodResults[i]!
      t.same(chunks.map(c => c.digest), chunkBuffer(new FastCdcChunker(DEFAULT_FASTCDC_OPTIONS), g.bytes).map(sha), `good-${i}: same chunks as its bytes`)
      t.ok(Buffer.concat(chunks.map(c => decompress(c.compressed))).equals(g.bytes), `good-${i}: frames decompress to the file`)
    }
    for (const [i, b] of bad.entries()) await t.rejects(badResults[i]!, { name: 'BadInputError', message: b.error })
  })
}

for (const workers of [0, 2]) {
  t.test(`ChunkingPool (workers: ${workers}) with large-ELF chunking cuts large ELF files smaller, read by path or in pieces, and other files as before`, async t => {
    const largeElf: LargeElfChunking = { minFileBytes: 1024 * 1024, cdc: { minSize: 2048, avgSize: 8192, maxSize: 32768 } }
    const pool = new ChunkingPool({ workers, params: { ...DEFAULT_CHUNKING, largeElf } })
    t.teardown(() => pool.close())
    const elf = (seed: string, size: number): Uint8Array => { const b = new Uint8Array(seededBytes(seed, size)); b.set(ELF_MAGIC); return b }
    const files = [elf('big-by-path', 2_000_000), elf('big-in-pieces', 5_000_000), seededBytes('data', 2_000_000), elf('small', 500_000)]
    const d = t.testdir()
    const results = files.map((bytes, i) => {
      if (i === 1) {
        const pieces = [1, 2, 100_000, 4_899_997].map((n, k, all) => bytes.subarray(all.slice(0, k).reduce((a, b) => a + b, 0), all.slice(0, k + 1).reduce((a, b) => a + b, 0)))
        return Promise.all(pieces.map((p, k) => pool.push(i, p, k === pieces.length - 1, bytes.length))).then(r => r.flat())
      }
      const path = join(d, `f${i}`)
      writeFileSync(path, bytes)
      return pool.pushFile(i, { path, size: bytes.length, label: `file f${i}` })
    })
    pool.flush()
    const cut = (bytes: Uint8Array, opts = DEFAULT_FASTCDC_OPTIONS): string[] => chunkBuffer(new FastCdcChunker(opts), bytes).map(sha)
    const chunks = await Promise.all(results)
    t.same(chunks[0]!.map(c => c.digest), cut(files[0]!, largeElf.cdc), 'large ELF read by path: small chunks')
    t.same(chunks[1]!.map(c => c.digest), cut(files[1]!, largeElf.cdc), 'large ELF in pieces (the first ones shorter than the magic): small chunks')
    t.same(chunks[2]!.map(c => c.digest), cut(files[2]!), 'large file that is not ELF: default chunks')
    t.same(chunks[3]!.map(c => c.digest), cut(files[3]!), 'small ELF file: default chunks')
    t.ok(chunks[0]!.length > 2 * cut(files[0]!).length, `many more chunks than the default (${chunks[0]!.length} against ${cut(files[0]!).length})`)
  })
}

t.test('ChunkingPool.pushFile() refuses a file too big to be read whole', async t => {
  const pool = new ChunkingPool({ workers: 1 })
  t.teardown(() => pool.close())
  await t.rejects(pool.pushFile(1, { path: '/dev/null', size: MAX_FILE_BY_PATH_BYTES + 1, label: 'file big' }), /internal: file big: .* too big to be read whole/)
})
