/**
 * Issue 12's round trip, on a layer tar with every writer's choice a TOC
 * cannot keep: PAX headers, long names, uname/gname, numbers written
 * GNU's old way (`000644 \0`), non-zero padding after a file's content, a
 * whiteout and an opaque marker, an end-of-archive marker padded to GNU
 * tar's 10240-byte record, and bytes after it. Push keeps the tar split
 * (src/format/tar-split.ts), and:
 *
 * - `exportImageLayout` writes that tar back byte for byte, in every format:
 *   the exported layer is the input's tar, the config the input's config,
 *   and (the input being uncompressed JSON as JS writes it) even the OCI
 *   manifest is the input's;
 * - pushing the export gives the same manifest digest in the store;
 * - a tar split that lies is caught by the rebuilt tar's digest: a clear
 *   error, nothing left behind; one that does not fit the TOC is not used,
 *   and without a split the tar is written from the TOC (same content,
 *   `exact: false`);
 * - `gcStore` keeps a split while its layer lives and deletes it with it.
 */
import t from 'tap'
import { readFile, readdir, utimes } from 'node:fs/promises'
import { join } from 'node:path'
import { buildLayerTar, dir, encodeEntryHeaders, file, sampleLayerEntries, type TarEntrySpec } from '../../fixtures/layer-dsl.js'
import { writeOciLayout } from '../../fixtures/oci-layout.js'
import { BLOCK_BYTES, END_OF_ARCHIVE, writeChecksum } from '../../fixtures/tar-header.js'
import { ChunkFetcher } from '../cache/chunk-fetcher.js'
import { MemoryChunkCache } from '../cache/memory-chunk-cache.js'
import { CorruptObjectError } from '../errors.js'
import { digestHex, type Digest } from '../format/digest.js'
import { tarSplitKey } from '../format/keys.js'
import { parseRef } from '../format/ref.js'
import { decodeTarSplit, encodeTarSplit } from '../format/tar-split.js'
import { gcStore } from '../gc/store-gc.js'
import { loadImage } from '../image/load-image.js'
import { compressMetadata, decompressMetadata } from '../image/metadata-objects.js'
import { pushImage } from '../image/push.js'
import { deleteRef } from '../image/refs.js'
import { loadTarSplit } from '../image/tar-splits.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { exportImageLayout, type ImageExportFormat } from './export-layout.js'

const work = t.testdir()
const store = openStore(`file://${join(work, 'store')}`)
const db = openMemoryNodeDb()
const fetcher = new ChunkFetcher(store, new MemoryChunkCache())
t.teardown(async () => { await fetcher.close(); await store.close() })

/** The tar as a writer other than ours might write it (see the file comment). */
function quirkyTar (entries: readonly TarEntrySpec[]): Buffer {
  const parts: Buffer[] = []
  for (const e of entries) {
    const headers = encodeEntryHeaders(e)
    if (e.kind === 'file') {
      const block = headers.subarray(headers.length - BLOCK_BYTES)
      block.write(`${e.mode.toString(8).padStart(6, '0')} \0`, 100, 8, 'latin1')
      writeChecksum(block)
    }
    parts.push(headers)
    if (e.kind !== 'file' || e.content === undefined) continue
    for (const chunk of e.content.chunks()) parts.push(Buffer.from(chunk))
    const rest = e.content.size % BLOCK_BYTES
    if (rest > 0) parts.push(Buffer.alloc(BLOCK_BYTES - rest, 0xa5))
  }
  parts.push(END_OF_ARCHIVE)
  const size = parts.reduce((n, p) => n + p.length, 0)
  parts.push(Buffer.alloc(Math.ceil(size / 10240) * 10240 - size), Buffer.from('bytes after the end of the archive\n'))
  return Buffer.concat(parts)
}

const lower = quirkyTar(sampleLayerEntries({ largeBytes: 300_001, sparseBytes: 1024 * 1024 }))
const upper = buildLayerTar([dir('etc'), file('etc/motd', 'hello\n', { uname: 'root', gname: 'root' })])
const layout = await writeOciLayout(join(work, 'layout'), { layers: [{ tar: lower, compression: 'gzip' }, { tar: upper, compression: 'none' }] })
const plain = await writeOciLayout(join(work, 'plain'), { layers: [{ tar: lower, compression: 'none' }, { tar: upper, compression: 'none' }], tag: 'v1' })
const warnings: string[] = []
const pushed = await pushImage(`oci:${layout.dir}`, parseRef('quirky:v1'), { store, db, warn: m => warnings.push(m) })

async function exportAs (format: ImageExportFormat, name: string, withSplits = true): Promise<Awaited<ReturnType<typeof exportImageLayout>>> {
  const image = await loadImage(store, parseRef('quirky:v1'))
  return await exportImageLayout(image, parseRef('quirky:v1'), fetcher, format, join(work, name),
    withSplits ? { tarSplit: async toc => await loadTarSplit(store, toc) } : {})
}

const blob = (dirPath: string, d: string): string => join(dirPath, 'blobs', 'sha256', d.slice('sha256:'.length))

t.test('exportImageLayout writes the pushed tars back byte for byte, and pushing the export gives the same manifest', async t => {
  t.ok(warnings.some(w => /non-zero bytes after the end-of-archive marker/.test(w)), 'the input really has bytes after its end marker')
  const r = await exportAs('oci', 'oci')
  t.same(r.layers.map(l => l.exact), [true, true], 'both layers rebuilt from their splits')
  t.same(r.layers.map(l => l.digest), [layout.layers[0]!.diffId, layout.layers[1]!.diffId], 'the exported layers are the source diff_ids')
  t.ok((await readFile(blob(join(work, 'oci'), r.layers[0]!.digest))).equals(lower), 'the exported lower layer is the input tar, byte for byte')
  t.ok((await readFile(blob(join(work, 'oci'), r.layers[1]!.digest))).equals(upper), 'and so is the upper one')
  t.equal(r.config, plain.config.digest, 'the config is the source config, byte for byte')
  t.equal(r.manifest, plain.manifest.digest, 'so an uncompressed source gives back its very manifest digest')

  for (const [format, src] of [['oci', `oci:${join(work, 'oci')}:v1`], ['docker-archive', `docker-archive:${join(work, 'docker.tar')}`], ['oci-archive', `oci-archive:${join(work, 'oci.tar')}:v1`]] as const) {
    if (format !== 'oci') t.equal((await exportAs(format, format === 'docker-archive' ? 'docker.tar' : 'oci.tar')).manifest, r.manifest, `${format}: the same image`)
    const back = await pushImage(src, parseRef(`back:${format}`), { store, db })
    t.equal(back.manifest, pushed.manifest, `push of the ${format} export: the same manifest digest in the store`)
  }

  // In a store that never saw the image, the export is read in full (nothing to skip) and verifies against its own config.
  const fresh = openStore(`file://${join(work, 'fresh')}`)
  t.teardown(() => fresh.close())
  const again = await pushImage(`oci:${join(work, 'oci')}:v1`, parseRef('quirky:v1'), { store: fresh, db: openMemoryNodeDb() })
  t.same(again.layers.map(l => l.skipped ?? false), [false, false], 'read in full')
  t.same(again.layers.map(l => l.diffId), [layout.layers[0]!.diffId, layout.layers[1]!.diffId], 'with the source diff_ids')
})

t.test('exportImageLayout refuses a tar split that lies, leaving nothing; without one it writes the tar from the TOC', async t => {
  const key = tarSplitKey(digestHex(layout.layers[0]!.diffId as Digest))
  const good = await store.get(key)
  const split = decodeTarSplit(decompressMetadata(good, key), key)
  const raw = split.raw.map(r => Buffer.from(r))
  raw[1]![157] = (raw[1]![157]! + 1) % 256 // one byte of the tar outside file content
  await store.put(key, compressMetadata(encodeTarSplit({ holes: split.holes, raw })))
  t.teardown(() => store.put(key, good))
  const err = await exportAs('oci', 'lying').then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof CorruptObjectError, 'a CorruptObjectError')
  t.match((err as Error).message, /^layer 1 of 2: the tar rebuilt from its tar split has digest sha256:\w+, not the layer's diff_id sha256:\w+ \(a corrupt tar-splits\/ object\)$/)
  t.same((await readdir(work)).filter(n => n.includes('lying')), [], 'no output and no temporary directory left')

  // A split that does not fit the TOC hole for hole (a TOC read under another ingest policy) is not used.
  await store.put(key, compressMetadata(encodeTarSplit({ holes: split.holes.slice(1), raw: raw.slice(1) })))
  const unfit = await exportAs('oci', 'unfit')
  t.same(unfit.layers.map(l => l.exact), [false, true], 'a split that does not fit: that layer is written from its TOC')

  await store.put(key, good)
  const fromToc = await exportAs('oci', 'from-toc', false)
  t.same(fromToc.layers.map(l => l.exact), [false, false])
  t.not(fromToc.layers[0]!.digest, layout.layers[0]!.diffId, 'without a split: our own tar, not the original bytes')
  const back = await pushImage(`oci:${join(work, 'from-toc')}:v1`, parseRef('quirky:from-toc'), { store, db })
  t.not(back.manifest, pushed.manifest, 'which is another layer in the store')
})

t.test('gcStore keeps a tar split while a layer of its tar lives, and deletes it with the last one', async t => {
  const gcStoreDir = openStore(`file://${join(work, 'gc')}`)
  t.teardown(() => gcStoreDir.close())
  await pushImage(`oci:${layout.dir}`, parseRef('quirky:v1'), { store: gcStoreDir, db: openMemoryNodeDb() })
  const keys = layout.layers.map(l => tarSplitKey(digestHex(l.diffId as Digest)))
  // gc deletes nothing written in the last few seconds (its clock margin): make the objects an hour old.
  const anHourAgo = new Date(Date.now() - 3600_000)
  for (const f of await readdir(join(work, 'gc'), { recursive: true, withFileTypes: true })) {
    if (f.isFile()) await utimes(join(f.parentPath, f.name), anHourAgo, anHourAgo)
  }
  await gcStore(gcStoreDir, { graceMs: 0 })
  for (const k of keys) t.ok(await gcStoreDir.stat(k), `${k.slice(0, 24)}… kept while its layer lives`)
  await deleteRef(gcStoreDir, parseRef('quirky:v1'))
  const r = await gcStore(gcStoreDir, { graceMs: 0 })
  t.ok(r.deletedObjects > 0, `gc deleted ${r.deletedObjects} objects`)
  for (const k of keys) t.equal(await gcStoreDir.stat(k), undefined, `${k.slice(0, 24)}… deleted with its layer`)
})
