import t from 'tap'
import type { ChunkRef } from '../format/toc.js'
import { planRanges } from './range-planner.js'

const ref = (blob: string, offset: number, compressedLength: number): ChunkRef =>
  ({ digest: `${blob}-${offset}`, blob, offset, compressedLength, length: compressedLength * 2 })
const opts = { maxGapBytes: 100, maxRunBytes: 1000 }
const shape = (runs: ReturnType<typeof planRanges>): Array<[string, number, number, number]> =>
  runs.map(r => [r.blob, r.offset, r.length, r.chunks.length])

t.test('planRanges() merges contiguous chunks of a blob into one run, whatever the input order', async t => {
  const refs = [ref('a', 200, 100), ref('a', 0, 100), ref('a', 100, 100)]
  t.same(shape(planRanges(refs, opts)), [['a', 0, 300, 3]])
  t.same(planRanges(refs, opts)[0]!.chunks.map(c => c.offset), [0, 100, 200], 'chunks by offset')
})

t.test('planRanges() merges across a gap up to maxGapBytes and splits beyond it', async t => {
  t.same(shape(planRanges([ref('a', 0, 100), ref('a', 200, 100)], opts)), [['a', 0, 300, 2]], 'gap of 100 merged')
  t.same(shape(planRanges([ref('a', 0, 100), ref('a', 201, 100)], opts)), [['a', 0, 100, 1], ['a', 201, 100, 1]], 'gap of 101 split')
})

t.test('planRanges() keeps runs within maxRunBytes and gives a huge chunk its own run', async t => {
  const refs = Array.from({ length: 25 }, (_, i) => ref('a', i * 100, 100))
  const runs = planRanges(refs, opts)
  t.same(shape(runs), [['a', 0, 1000, 10], ['a', 1000, 1000, 10], ['a', 2000, 500, 5]])
  t.same(shape(planRanges([ref('a', 0, 100), ref('a', 100, 5000), ref('a', 5100, 100)], opts)),
    [['a', 0, 100, 1], ['a', 100, 5000, 1], ['a', 5100, 100, 1]])
})

t.test('planRanges() never merges chunks of different blobs', async t => {
  t.same(shape(planRanges([ref('a', 0, 100), ref('b', 100, 100), ref('a', 100, 100)], opts)),
    [['a', 0, 200, 2], ['b', 100, 100, 1]])
  t.same(planRanges([], opts), [])
})
