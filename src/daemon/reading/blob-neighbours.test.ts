import t from 'tap'
import { BlobNeighbours, NEIGHBOUR_READAHEAD_BYTES, REMOTE_NEIGHBOUR_READAHEAD_BYTES, neighbourBudget } from './blob-neighbours.js'
import { resolveChunk, type LayerToc } from '../../format/toc.js'
import { FaultyObjectStore } from '../../store/faulty-object-store.js'
import { FsObjectStore } from '../../store/fs-object-store.js'
import { MemoryObjectStore } from '../../store/memory-object-store.js'
import { RetryingObjectStore } from '../../store/retrying-object-store.js'
import { S3ObjectStore } from '../../store/s3-object-store.js'

const hex = (n: number): string => n.toString(16).padStart(64, '0')
const toc: LayerToc = {
  diffId: `sha256:${hex(0)}`,
  blobs: [hex(100), hex(200)],
  // blob 0 holds chunks 1..5 (20 KiB each), listed out of offset order; blob 1 holds chunk 6
  chunks: [3, 1, 5, 2, 4].map(n => ({ digest: hex(n), blob: 0, offset: (n - 1) * 20480, compressedLength: 20480, length: 40960 }))
    .concat([{ digest: hex(6), blob: 1, offset: 0, compressedLength: 10, length: 10 }]),
  entries: []
}
const ref = (n: number) => resolveChunk(toc, toc.chunks.findIndex(c => c.digest === hex(n)))

t.test('BlobNeighbours.extend() adds the next chunks of the same blob, within the byte budget', async t => {
  const nb = new BlobNeighbours([toc])
  t.same(nb.extend([ref(1)], () => false, 64 * 1024).map(r => r.offset / 20480 + 1), [2, 3, 4], 'offset order, up to the budget')
  t.same(nb.extend([ref(5)], () => false), [], 'nothing after the last chunk of a blob')
  t.same(nb.extend([ref(6)], () => false), [], 'other blobs are not read')
})

t.test('BlobNeighbours.extend() skips cached chunks and chunks already asked for', async t => {
  const nb = new BlobNeighbours([toc])
  t.same(nb.extend([ref(1), ref(2)], d => d === hex(3), 64 * 1024).map(r => r.offset / 20480 + 1), [4, 5], 'each miss has its own budget')
})

t.test('neighbourBudget() reads further on a remote store, as the stores report it', async t => {
  t.equal(neighbourBudget(true), REMOTE_NEIGHBOUR_READAHEAD_BYTES)
  t.equal(neighbourBudget(false), NEIGHBOUR_READAHEAD_BYTES)
  t.equal(new S3ObjectStore({ bucket: 'b', endpoint: 'http://127.0.0.1:9' }).remote, true)
  t.equal(new RetryingObjectStore(new FaultyObjectStore(new S3ObjectStore({ bucket: 'b', endpoint: 'http://127.0.0.1:9' }))).remote, true, 'decorators report their inner store')
  t.equal(new FsObjectStore(t.testdir()).remote, false)
  t.equal(new MemoryObjectStore().remote, false)
  t.ok(REMOTE_NEIGHBOUR_READAHEAD_BYTES > NEIGHBOUR_READAHEAD_BYTES)
})
