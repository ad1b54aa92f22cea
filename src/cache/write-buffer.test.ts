import t from 'tap'
import { WriteBuffer, type BufferedEntry } from './write-buffer.js'

const entry = (key: string, size: number, kind: 'chunk' | 'meta' = 'chunk'): BufferedEntry =>
  ({ kind, key, bytes: Buffer.alloc(size, key), atimeMs: 1 })

t.test('WriteBuffer.add() holds entries visible until their batch commits, one batch per delay', async t => {
  const batches: string[][] = []
  let release!: () => void
  const gate = new Promise<void>(resolve => { release = resolve })
  const buffer = new WriteBuffer({
    delayMs: 20,
    maxBytes: 1 << 20,
    commit: async batch => { batches.push(batch.map(e => e.key)); await gate },
    onError: () => t.fail('no error expected')
  })
  buffer.add(entry('a', 10))
  buffer.add(entry('b', 20, 'meta'))
  t.same(buffer.openUsage(), { bytes: 30, chunks: 1, metaBytes: 20, metaObjects: 1 })
  t.equal(buffer.get('a')?.bytes.length, 10, 'visible before its batch')
  await new Promise(resolve => setTimeout(resolve, 40))
  t.same(batches, [['a', 'b']], 'one batch after the delay')
  t.same(buffer.openUsage(), { bytes: 0, chunks: 0, metaBytes: 0, metaObjects: 0 }, 'handed to the backend')
  t.equal(buffer.get('b')?.kind, 'meta', 'still visible while committing')
  release()
  await buffer.flush()
  t.equal(buffer.get('a'), undefined, 'gone from memory once committed')
  t.equal(buffer.size, 0)
})

t.test('WriteBuffer.add() issues a batch at once when maxBytes is reached; flush() issues the rest', async t => {
  const batches: string[][] = []
  const buffer = new WriteBuffer({
    delayMs: 60_000,
    maxBytes: 100,
    commit: async batch => { batches.push(batch.map(e => e.key)) },
    onError: () => t.fail('no error expected')
  })
  buffer.add(entry('a', 60))
  t.same(batches, [])
  buffer.add(entry('b', 60))
  t.same(batches, [['a', 'b']], 'issued synchronously by the add that filled it')
  buffer.add(entry('c', 1))
  await buffer.flush()
  t.same(batches, [['a', 'b'], ['c']])
  t.equal(buffer.size, 0)
})

t.test('WriteBuffer reports a failed batch and forgets its entries; flush() does not reject', async t => {
  const failed: string[] = []
  const buffer = new WriteBuffer({
    delayMs: 60_000,
    maxBytes: 1 << 20,
    commit: async batch => { if (batch.some(e => e.key === 'bad')) throw new Error('MDB_MAP_FULL') },
    onError: (err, batch) => { failed.push(`${(err as Error).message}: ${batch.map(e => e.key).join(',')}`) }
  })
  buffer.add(entry('bad', 1))
  buffer.add(entry('x', 1))
  await buffer.flush()
  t.same(failed, ['MDB_MAP_FULL: bad,x'])
  t.equal(buffer.get('x'), undefined, 'not served: it was never stored')
  buffer.add(entry('y', 1))
  await buffer.flush()
  t.same(failed.length, 1, 'later batches go on')
})

t.test('WriteBuffer.limits: smaller limits apply to the open batch at once, then to later ones; bad limits change nothing', async t => {
  const batches: string[][] = []
  const buffer = new WriteBuffer({
    delayMs: 60_000,
    maxBytes: 1 << 20,
    commit: async batch => { batches.push(batch.map(e => e.key)) },
    onError: () => t.fail('no error expected')
  })
  t.same(buffer.limits, { delayMs: 60_000, maxBytes: 1 << 20 }, 'the options\' limits at first')
  buffer.add(entry('a', 60))
  buffer.limits = { delayMs: 60_000, maxBytes: 50 }
  t.same(batches, [['a']], 'an open batch already past the new maxBytes goes at once')
  buffer.limits = { delayMs: 30, maxBytes: 100 }
  buffer.add(entry('b', 60))
  t.same(batches, [['a']], 'under the new maxBytes: waits')
  buffer.add(entry('c', 60))
  t.same(batches, [['a'], ['b', 'c']], 'the new maxBytes issues the batch')
  buffer.add(entry('d', 1))
  await new Promise(resolve => setTimeout(resolve, 80))
  t.same(batches, [['a'], ['b', 'c'], ['d']], 'the new delay, not 60 s')
  buffer.limits = { delayMs: 60_000, maxBytes: 1 << 20 }
  buffer.add(entry('e', 1))
  buffer.limits = { delayMs: 20, maxBytes: 1 << 20 }
  await new Promise(resolve => setTimeout(resolve, 80))
  t.same(batches.at(-1), ['e'], 'a shorter delay cuts the open batch\'s wait')
  t.throws(() => { buffer.limits = { delayMs: -1, maxBytes: 10 } }, /delayMs must be a finite number ≥ 0, not -1/)
  t.throws(() => { buffer.limits = { delayMs: 10, maxBytes: NaN } }, /maxBytes must be a finite number ≥ 0, not NaN/)
  t.same(buffer.limits, { delayMs: 20, maxBytes: 1 << 20 }, 'unchanged by the bad ones')
  await buffer.flush()
})
