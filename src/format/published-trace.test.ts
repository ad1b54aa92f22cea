import t from 'tap'
import { CorruptObjectError } from '../errors.js'
import { sha256Digest } from './digest.js'
import { decodePublishedTrace, encodePublishedTrace, TRACE_MEDIA_TYPE } from './published-trace.js'
import { resolveChunk, type LayerToc } from './toc.js'

const hex = (n: number): string => n.toString(16).padStart(64, '0')
function toc (first: number, count: number, shared?: number): LayerToc {
  const chunks = Array.from({ length: count }, (_, i) => ({ digest: hex(first + i), blob: 0, offset: i * 100, compressedLength: 100, length: 300 }))
  if (shared !== undefined) chunks.push({ digest: hex(shared), blob: 0, offset: count * 100, compressedLength: 100, length: 300 })
  return { diffId: `sha256:${hex(0)}`, blobs: [hex(first + 1000)], chunks, entries: [] }
}
const tocs = [toc(1, 5), toc(101, 4, 3)] // layer 1 also holds layer 0's chunk 3 (hex 3)
const manifest = sha256Digest(Buffer.from('manifest'))

t.test('encodePublishedTrace() names chunks by [layer, index] in read order, once, first layer first; decodePublishedTrace() gives the refs back', async t => {
  const refs = [resolveChunk(tocs[1]!, 2), resolveChunk(tocs[0]!, 3), resolveChunk(tocs[1]!, 4), resolveChunk(tocs[0]!, 0), resolveChunk(tocs[1]!, 2)]
  const bytes = encodePublishedTrace(manifest, tocs, refs)
  t.same(JSON.parse(bytes.toString()), { schemaVersion: 1, mediaType: TRACE_MEDIA_TYPE, manifest, chunks: [[1, 2], [0, 3], [0, 2], [0, 0]] },
    "layer 1's last chunk (layer 0's chunk 2) is named by layer 0; the repeat is dropped")
  t.same(decodePublishedTrace(bytes, manifest, tocs, 'x').map(r => r.digest), [hex(103), hex(4), hex(3), hex(1)])
})

t.test('encodePublishedTrace() leaves out refs the image does not hold', async t => {
  const stranger = { digest: hex(999), blob: hex(5), offset: 0, compressedLength: 1, length: 1 }
  t.same(JSON.parse(encodePublishedTrace(manifest, tocs, [stranger, resolveChunk(tocs[0]!, 1)]).toString()).chunks, [[0, 1]])
})

t.test('decodePublishedTrace() refuses what is not a trace of this image, naming the source', async t => {
  const good = { schemaVersion: 1, mediaType: TRACE_MEDIA_TYPE, manifest, chunks: [[0, 1]] }
  const cases: Array<[string, unknown, RegExp]> = [
    ['not JSON', '{', /not JSON/],
    ['an array', [], /not an object/],
    ['another version', { ...good, schemaVersion: 2 }, /schemaVersion 2/],
    ['another manifest', { ...good, manifest: sha256Digest(Buffer.from('other')) }, /names manifest/],
    ['chunks not a list', { ...good, chunks: {} }, /chunks is not a list/],
    ['a layer out of range', { ...good, chunks: [[2, 0]] }, /entry 0 \(\[2,0\]\)/],
    ['a chunk out of range', { ...good, chunks: [[0, 1], [1, 5]] }, /entry 1 \(\[1,5\]\)/],
    ['a fractional index', { ...good, chunks: [[0, 1.5]] }, /entry 0/],
    ['a malformed entry', { ...good, chunks: [[0]] }, /entry 0/]
  ]
  for (const [name, value, why] of cases) {
    const bytes = Buffer.from(typeof value === 'string' ? value : JSON.stringify(value))
    t.throws(() => decodePublishedTrace(bytes, manifest, tocs, 'store traces/abc'), CorruptObjectError, name)
    t.throws(() => decodePublishedTrace(bytes, manifest, tocs, 'store traces/abc'), { message: /^store traces\/abc: not a layerd access trace of sha256:/ }, name)
    t.throws(() => decodePublishedTrace(bytes, manifest, tocs, 'store traces/abc'), { message: why }, name)
  }
})
