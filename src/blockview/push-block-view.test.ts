/**
 * pushBlockView / pushBlockViewImage against a real fs store: the raw file
 * reads back from its chunks bit for bit, its free space costs one chunk,
 * and pushing it again (or a block view of the next image version) uploads
 * only what is new.
 */
import t from 'tap'
import { withStoreLease } from '../store/store-leases.js'
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { decodeChunk } from '../cache/chunk-decoder.js'
import { blobKey } from '../format/keys.js'
import { parseRef } from '../format/ref.js'
import { resolveChunk } from '../format/toc.js'
import { getManifest, getToc } from '../image/metadata-objects.js'
import { resolveRef } from '../image/refs.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { FsObjectStore } from '../store/fs-object-store.js'
import { buildBlockView } from './block-view-builder.js'
import { pushBlockViewImage } from './block-view-image.js'
import { BLOCK_VIEW_FILE, pushBlockView } from './push-block-view.js'

const images = await ensureDebianImages()

t.test('pushBlockView() stores a one-file layer that reads back as the raw file; a second push uploads nothing', async t => {
  const dir = t.testdir({})
  const raw = await buildBlockView(images.images['python-v1'].rootfs, { uuidSeed: 'python-v1', out: join(dir, 'v1.raw'), headroomBytes: 128 * 1024 * 1024 })
  const store = new FsObjectStore(join(dir, 'store'), { fsync: false })
  const db = openMemoryNodeDb()
  const first = await withStoreLease(store, 'test push', async lease => await pushBlockView(raw.path, { store, db, workers: 1, lease }))
  const plain = await readFile(raw.path)
  t.equal(first.rawDigest, `sha256:${createHash('sha256').update(plain).digest('hex')}`, 'rawDigest is the file\'s sha256')
  t.equal(first.existed, false)

  const toc = await getToc(store, first.digest)
  t.same(toc.entries.map(e => [e.path, e.type, e.mode]), [['', 'dir', 0o755], [BLOCK_VIEW_FILE, 'file', 0o444]])
  const file = toc.entries[1]!
  t.equal(file.size, raw.sizeBytes)
  const h = createHash('sha256')
  for (const span of file.spans ?? []) {
    const ref = resolveChunk(toc, span.chunk)
    const frame = await store.getRange(blobKey(ref.blob), ref.offset, ref.compressedLength)
    h.update(decodeChunk(frame, ref, store.url).subarray(span.offset, span.offset + span.length))
  }
  t.equal(`sha256:${h.digest('hex')}`, first.rawDigest, 'the chunks give back the raw file')
  t.ok(first.stats.storedBytes < raw.tree.fileBytes * 0.6, `stored ${(first.stats.storedBytes / 1e6).toFixed(1)} MB for a ${(raw.sizeBytes / 1e6).toFixed(0)} MB block view`)
  t.ok(toc.chunks.length < (file.spans ?? []).length - 900, `128 MiB of free space is one repeated zero chunk (${toc.chunks.length} distinct chunks for ${(file.spans ?? []).length} spans)`)

  const again = await withStoreLease(store, 'test push', async lease => await pushBlockView(raw.path, { store, db, workers: 1, lease }))
  t.equal(again.digest, first.digest, 'same TOC digest')
  t.equal(again.existed, true)
  t.equal(again.stats.newStoredBytes, 0, 'nothing new uploaded')

  const v2 = await buildBlockView(images.images['python-v2'].rootfs, { uuidSeed: 'python-v2', out: join(dir, 'v2.raw') })
  const next = await pushBlockViewImage(v2.path, parseRef('bv/python:v2'), { config: { Cmd: ['python3'] } }, { store, db, workers: 1 })
  t.ok(next.stats.newStoredBytes < next.stats.storedBytes * 0.25,
    `the next image version's block view uploads ${(next.stats.newStoredBytes / 1e6).toFixed(1)} of ${(next.stats.storedBytes / 1e6).toFixed(1)} MB`)
  t.equal(await resolveRef(store, parseRef('bv/python:v2')), next.manifest)
  const manifest = await getManifest(store, next.manifest)
  t.same(manifest.layers.map(l => l.digest), [next.digest], 'a one-layer image of the block view')
  t.equal(manifest.blockView, next.digest)
  t.same(manifest.config.config?.Cmd, ['python3'], 'the image config travels along')
  await store.close()
})
