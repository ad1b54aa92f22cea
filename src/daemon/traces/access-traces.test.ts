import t from 'tap'
import { openMemoryNodeDb } from '../../state/node-db.js'
import { AccessTraces, MAX_TRACE_CHUNKS, TraceRecorder, prefetchOrder } from './access-traces.js'
import type { ChunkRef } from '../../format/toc.js'

const ref = (n: number): ChunkRef => ({ digest: n.toString(16).padStart(64, '0'), blob: 'b'.repeat(64), offset: n * 10, compressedLength: 10, length: 20 })

t.test('TraceRecorder.record() keeps first-touch order, once per chunk, bounded', async t => {
  const r = new TraceRecorder()
  r.record([ref(3), ref(1)])
  r.record([ref(1), ref(2), ref(3)])
  t.same(r.refs.map(x => x.offset), [30, 10, 20])
  const big = new TraceRecorder()
  big.record(Array.from({ length: MAX_TRACE_CHUNKS + 5 }, (_, i) => ref(i)))
  t.equal(big.refs.length, MAX_TRACE_CHUNKS)
})

t.test('AccessTraces.save() replaces the trace of a manifest and load() returns it in order', async t => {
  const traces = new AccessTraces(openMemoryNodeDb())
  t.same(traces.load('sha256:m'), [])
  traces.save('sha256:m', [ref(5), ref(2)])
  traces.save('sha256:m', [ref(7), ref(1), ref(4)])
  t.same(traces.load('sha256:m'), [ref(7), ref(1), ref(4)])
  traces.save('sha256:m', [])
  t.equal(traces.load('sha256:m').length, 3, 'an empty trace does not erase a useful one')
})

t.test('prefetchOrder() puts traced chunks first, then the rest, each once', async t => {
  const all = [ref(1), ref(2), ref(3), ref(4)]
  t.same(prefetchOrder([ref(3), ref(1)], all).map(x => x.offset), [30, 10, 20, 40])
  t.same(prefetchOrder([], all), all)
})
