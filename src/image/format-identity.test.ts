/**
 * The format's identity, pinned: a push of a code-built layer (fixed
 * mtimes, seeded content) must give these exact objects. A change to the
 * TOC encoding, the manifest, the tar split, chunking, blob packing or
 * metadata compression changes a digest here, so it cannot go unnoticed: if the
 * change is meant, it is a format change (TOC_VERSION, a migration story),
 * and these numbers are updated with it. Chunk digests of seeded bytes are
 * pinned in src/format/chunker.test.ts.
 */
import t from 'tap'
import { createHash } from 'node:crypto'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { buildLayerTar, sampleLayerEntries } from '../../fixtures/layer-dsl.js'
import { encodeToc } from '../format/toc.js'
import { parseRef } from '../format/ref.js'
import { MemoryObjectStore } from '../store/memory-object-store.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { loadImage } from './load-image.js'
import { pushImage } from './push.js'

const PINNED = {
  /** sha256 of the uncompressed layer tar (the DSL's bytes, not ours). */
  diffId: 'sha256:8ed63cd7ea8c167478f0090f2ecbe3a31c475d0394fe251ae70abb4d8456b055',
  /** The layer's identity: sha256 of its stored TOC object (zstd of the TOC bytes). */
  layer: 'sha256:3691e2fd11b7097fb5eb16c493f317a3002251587597bceaf024580ee27f4d5d',
  /** sha256 and length of the plain TOC bytes (encodeToc). */
  tocBytesSha256: '5a05486c54813d53c2e16c5c4bc3a825c85fdaabb067cb4289c3ba81745f3fe0',
  tocBytes: 31547,
  tocCounts: { entries: 40, chunks: 237, blobs: 1 },
  manifest: 'sha256:543a1641b7bccf146a42ebaa57b5d65d0559551882fd98ee0b6b29c5336e7c24',
  /** sha256 of the stored tar split (zstd of src/format/tar-split.ts's encoding): what export needs to write the tar again. */
  tarSplit: '9454ebb33955fd524ee742938496ae4b78b772cde862311a25964e87bc0bfdcc',
  /** Every object the push writes. */
  keys: [
    'blob-index/6c86c364a6d3a34e28f08ea37c4ad7cb92344be5f32238bcac2c67aea585cab0',
    'blobs/6c86c364a6d3a34e28f08ea37c4ad7cb92344be5f32238bcac2c67aea585cab0',
    'layer-by-diff/8ed63cd7ea8c167478f0090f2ecbe3a31c475d0394fe251ae70abb4d8456b055',
    'layers/3691e2fd11b7097fb5eb16c493f317a3002251587597bceaf024580ee27f4d5d',
    'manifests/543a1641b7bccf146a42ebaa57b5d65d0559551882fd98ee0b6b29c5336e7c24',
    'refs/pin%2Fsample/v1',
    'tar-splits/8ed63cd7ea8c167478f0090f2ecbe3a31c475d0394fe251ae70abb4d8456b055'
  ]
}

for (const workers of [0, 2]) {
  t.test(`pushImage() of the seeded sample layer gives the pinned TOC, layer, manifest and objects (${workers === 0 ? 'inline' : `${workers} workers`})`, async t => {
    const tar = join(t.testdir(), 'sample.tar')
    await writeFile(tar, buildLayerTar(sampleLayerEntries()))
    const store = new MemoryObjectStore()
    const pushed = await pushImage(tar, parseRef('pin/sample:v1'), { store, db: openMemoryNodeDb(), workers })
    t.equal(pushed.manifest, PINNED.manifest)
    t.same(pushed.layers.map(l => l.digest), [PINNED.layer])
    const image = await loadImage(store, 'pin/sample:v1')
    const toc = image.tocs[0]!
    t.equal(toc.diffId, PINNED.diffId)
    const bytes = encodeToc(toc)
    t.equal(createHash('sha256').update(bytes).digest('hex'), PINNED.tocBytesSha256)
    t.equal(bytes.length, PINNED.tocBytes)
    t.same({ entries: toc.entries.length, chunks: toc.chunks.length, blobs: toc.blobs.length }, PINNED.tocCounts)
    const keys: string[] = []
    for await (const k of store.list('')) keys.push(k)
    t.same(keys.sort(), PINNED.keys)
    t.equal(createHash('sha256').update(await store.get(PINNED.keys.at(-1)!)).digest('hex'), PINNED.tarSplit)
  })
}
