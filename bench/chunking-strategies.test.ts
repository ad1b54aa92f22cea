import t from 'tap'
import { createHash } from 'node:crypto'
import { candidates } from './chunking-strategies.js'
import type { SeriesFile } from './image-series.js'

/** Files of mixed sizes (empty-free, as the loader gives them), with seeded pseudo-random content. */
function seededFiles (): SeriesFile[] {
  const sizes = [1, 100, 4000, 9000, 70_000, 300, 2_000_000, 50, 130_000, 20_000, 1_100_000, 7]
  return sizes.map((size, i) => {
    const data = new Uint8Array(size)
    let block = createHash('sha256').update(`file-${i}`).digest()
    for (let at = 0; at < size; at += 32) {
      data.set(block.subarray(0, Math.min(32, size - at)), at)
      block = createHash('sha256').update(block).digest()
    }
    return { path: `f${i}`, data }
  })
}

/** The bytes a reader of file k gets from its chunks: find the file inside the concatenation of its chunk range. */
function locate (chunks: Uint8Array[], first: number, last: number, data: Uint8Array): boolean {
  const joined = Buffer.concat(chunks.slice(first, last + 1))
  return joined.indexOf(Buffer.from(data)) >= 0
}

t.test('candidates() chunkLayer() covers every file with the chunks it names', async t => {
  const files = seededFiles()
  const total = files.reduce((n, f) => n + f.data.length, 0)
  for (const c of candidates()) {
    const { chunks, files: spans } = c.chunkLayer(files)
    t.equal(chunks.reduce((n, ch) => n + ch.length, 0), total, `${c.name}: chunks hold every byte once`)
    t.equal(spans.length, files.length, `${c.name}: one span per file`)
    const bad = files.filter((f, k) => {
      const s = spans[k]!
      return s.size !== f.data.length || s.first > s.last || !locate(chunks, s.first, s.last, f.data)
    })
    t.same(bad.map(f => f.path), [], `${c.name}: each file lies inside its chunk range`)
    if (c.name.endsWith('/file') || c.name === 'whole-file') {
      const exact = spans.every((s, k) => chunks.slice(s.first, s.last + 1).reduce((n, ch) => n + ch.length, 0) === files[k]!.data.length)
      t.ok(exact, `${c.name}: per-file chunking reads exactly the file`)
    }
  }
})

t.test('candidates() packed strategies never split a small file', async t => {
  const files = seededFiles()
  for (const c of candidates().filter(c => c.name.startsWith('packed-'))) {
    const threshold = Number(/\/(\d+)k$/.exec(c.name)![1]) * 1024
    const { files: spans } = c.chunkLayer(files)
    const split = spans.filter(s => s.size < threshold && s.first !== s.last)
    t.equal(split.length, 0, `${c.name}: files under ${threshold} bytes sit in one chunk`)
  }
})
