import t from 'tap'
import { join } from 'node:path'
import { writeFile } from 'node:fs/promises'
import { BadInputError, LayerdError, LimitExceededError, StoreUnavailableError } from '../errors.js'
import { BROKEN_LAYERS, gzipBomb, writeOciLayoutMissingLayer } from '../../fixtures/broken.js'
import { dir, file, hardlink, sampleLayerEntries, writeLayerTar, buildLayerTar, largeFile } from '../../fixtures/layer-dsl.js'
import { parseRef } from '../format/ref.js'
import { layerKey, BLOBS_PREFIX } from '../format/keys.js'
import { digestHex } from '../format/digest.js'
import { MemoryObjectStore } from '../store/memory-object-store.js'
import { FaultyObjectStore } from '../store/faulty-object-store.js'
import { openMemoryNodeDb, openNodeDb } from '../state/node-db.js'
import { pushImage, pushSource } from './push.js'
import { openDirectory } from './sources/directory-source.js'
import { ingestContext } from './sources/ingest-policy.js'
import type { LayerSource } from './sources/image-source.js'
import { truncateSync } from 'node:fs'
import { readRef } from './refs.js'
import { loadImage } from './load-image.js'
import { getToc } from './metadata-objects.js'

const ref = parseRef('test/img:v1')
const opts = (store: MemoryObjectStore | FaultyObjectStore) => ({ store, db: openMemoryNodeDb(), workers: 1, packBytes: 64 * 1024 })

t.test('pushImage() stores a layer tar as TOC, manifest and ref, and the TOC describes every entry', async t => {
  const d = t.testdir()
  const tar = join(d, 'layer.tar.gz')
  await writeLayerTar(tar, sampleLayerEntries(), 'gzip')
  const store = new MemoryObjectStore()
  const result = await pushImage(tar, ref, opts(store))
  t.equal(result.layers.length, 1)
  const record = await readRef(store, ref)
  t.equal(record?.history[0]?.manifest, result.manifest)
  const image = await loadImage(store, 'test/img:v1')
  const toc = image.tocs[0]!
  const byPath = new Map(toc.entries.map(e => [e.path, e]))
  t.equal(byPath.get('etc/.wh.removed.conf'), undefined, 'whiteout files do not appear as files')
  t.equal(byPath.get('etc/removed.conf')?.type, 'whiteout')
  t.ok(toc.entries.some(e => e.type === 'dir' && e.path === 'var/cache'))
  t.ok(toc.entries.some(e => e.type === 'opaque' && e.path === 'var/cache'))
  for (const e of toc.entries) {
    if (e.type !== 'file') continue
    t.equal((e.spans ?? []).reduce((n, s) => n + s.length, 0), e.size, `${e.path}: spans cover the file`)
  }
  t.equal(image.manifest.config.rootfs?.diff_ids[0], toc.diffId)
})

t.test('pushImage() of the same image again uploads no chunks, and a changed version only new ones', async t => {
  const d = t.testdir()
  const v1 = [dir('data'), largeFile('data/big.bin', 4 * 1024 * 1024, 'v1'), file('data/small.txt', 'one')]
  const v2 = [dir('data'), largeFile('data/big.bin', 4 * 1024 * 1024, 'v1'), file('data/small.txt', 'two'), file('data/new.txt', 'fresh')]
  await writeFile(join(d, 'v1.tar'), buildLayerTar(v1))
  await writeFile(join(d, 'v2.tar'), buildLayerTar(v2))
  const store = new FaultyObjectStore(new MemoryObjectStore())
  // A node database on disk: the chunking workers read it to skip compressing stored chunks.
  const o = { ...opts(new MemoryObjectStore()), db: openNodeDb(join(d, 'home')), workers: 2 }
  const first = await pushImage(join(d, 'v1.tar'), ref, { ...o, store })
  t.ok(first.layers[0]!.newStoredBytes > 1024 * 1024, 'the first push stores the content')
  const blobsAfterFirst = store.putKeys.filter(k => k.startsWith(BLOBS_PREFIX)).length
  const again = await pushImage(join(d, 'v1.tar'), ref, { ...o, store })
  t.equal(again.layers[0]!.newPlainBytes, 0)
  t.equal(again.layers[0]!.existed, true, 'the identical TOC is found, not rewritten')
  t.equal(store.putKeys.filter(k => k.startsWith(BLOBS_PREFIX)).length, blobsAfterFirst, 'no blob uploaded')
  const second = await pushImage(join(d, 'v2.tar'), parseRef('test/img:v2'), { ...o, store })
  t.ok(second.layers[0]!.newPlainBytes < 200 * 1024, `v2 stores only the chunks around its changes (${second.layers[0]!.newPlainBytes} bytes)`)
  t.ok(second.layers[0]!.dedupPlainBytes >= 3.5 * 1024 * 1024)
})

t.test('pushImage() dedups across nodes through the store\'s blob indexes', async t => {
  const d = t.testdir()
  await writeFile(join(d, 'l.tar'), buildLayerTar([largeFile('f', 2 * 1024 * 1024, 'x')]))
  const store = new MemoryObjectStore()
  await pushImage(join(d, 'l.tar'), ref, opts(store))
  const other = await pushImage(join(d, 'l.tar'), parseRef('other/node:v1'), opts(store)) // fresh node db
  t.equal(other.layers[0]!.newPlainBytes, 0)
})

for (const fixture of BROKEN_LAYERS) {
  t.test(`pushImage() of ${fixture.name}: ${fixture.expect === 'reject' ? 'fails naming the input, no ref' : 'accepted with a warning'}`, async t => {
    const d = t.testdir()
    const path = join(d, `${fixture.name}.tar`)
    await writeFile(path, fixture.build())
    const store = new MemoryObjectStore()
    const warnings: string[] = []
    const run = pushImage(path, ref, { ...opts(store), warn: m => warnings.push(m) })
    if (fixture.expect === 'reject') {
      const err = await run.then(() => undefined, (e: Error) => e)
      t.ok(err instanceof BadInputError || err instanceof LimitExceededError, `${err?.constructor.name}: ${err?.message}`)
      t.equal((err as LayerdError | undefined)?.code, fixture.reason?.code, `code ${fixture.reason?.code ?? '(no reason recorded)'}`)
      t.match(err?.message ?? '', fixture.reason?.message ?? /^$ no reason recorded/, 'refused for its own reason')
      t.match(err?.message ?? '', path, 'the message names the input')
      t.notMatch(err?.message ?? '', /\n/, 'one line')
      t.equal(await readRef(store, ref), undefined, 'no ref written')
    } else {
      await run
      t.ok(warnings.some(w => w.includes(path)), 'a warning names the input')
      const image = await loadImage(store, 'test/img:v1')
      t.ok(image.tocs[0]!.entries.some(e => e.path === 'etc/x'), 'the absolute name is made relative')
    }
  })
}

t.test('pushImage() refuses a decompression bomb early', async t => {
  const d = t.testdir()
  const path = join(d, 'bomb.tar.gz')
  await writeFile(path, gzipBomb(2 * 1024 ** 3))
  const store = new MemoryObjectStore()
  const started = Date.now()
  await t.rejects(pushImage(path, ref, { ...opts(store), limits: { ratioFloorBytes: 64 * 1024 * 1024 } }), LimitExceededError)
  t.ok(Date.now() - started < 30_000, 'well before decompressing 2 GiB')
  t.equal(await readRef(store, ref), undefined)
})

t.test('pushImage() refuses an OCI layout whose manifest names a missing layer before uploading anything', async t => {
  const d = t.testdir()
  const info = await writeOciLayoutMissingLayer(join(d, 'layout'))
  const store = new FaultyObjectStore(new MemoryObjectStore())
  await t.rejects(pushImage(join(d, 'layout'), ref, { ...opts(new MemoryObjectStore()), store }), { name: 'BadInputError', message: new RegExp(digestHex(info.missingDigest)) })
  t.equal(store.counters.puts, 0)
})

t.test('pushImage() refuses an image whose layers conflict once merged (hardlink to a missing file)', async t => {
  const d = t.testdir()
  const bad = join(d, 'bad.tar')
  await writeFile(bad, buildLayerTar([file('a', 'x'), hardlink('b', 'missing/target')]))
  await t.rejects(pushImage(bad, ref, opts(new MemoryObjectStore())), { name: 'BadInputError', message: /missing\/target/ })
})

t.test('pushImage() leaves no ref when the store fails mid-push, and a rerun uploads only what is missing', async t => {
  const d = t.testdir()
  const path = join(d, 'layer.tar')
  const entries = Array.from({ length: 8 }, (_, i) => largeFile(`f${i}.bin`, 512 * 1024, `seed-${i}`))
  await writeFile(path, buildLayerTar(entries))
  const memory = new MemoryObjectStore()
  const store = new FaultyObjectStore(memory)
  store.addFault({ ops: ['put'], keyPrefix: BLOBS_PREFIX, skip: 3, times: 1 })
  const o = { ...opts(memory), store }
  await t.rejects(pushImage(path, ref, o), StoreUnavailableError)
  t.equal(await readRef(memory, ref), undefined, 'no ref after the failure')
  const firstBytes = store.counters.bytesPut
  t.ok(firstBytes > 0, 'some blobs made it before the failure')
  store.resetCounters()
  const rerun = await pushImage(path, ref, o)
  t.ok(rerun.layers[0]!.dedupPlainBytes > 0, 'the rerun reuses the sealed blobs')
  t.ok(store.counters.bytesPut < 4 * 1024 * 1024 - rerun.layers[0]!.dedupPlainBytes / 2, `rerun put ${store.counters.bytesPut} bytes`)
  const toc = await getToc(memory, rerun.layers[0]!.digest)
  t.equal(toc.entries.length, 8)
  t.ok(await memory.stat(layerKey(digestHex(rerun.layers[0]!.digest))))
})

t.test('pushImage() skips a layer the store holds under its declared blob digest or diff_id, and distrusts lying hints', async t => {
  const d = t.testdir()
  const { writeOciLayout } = await import('../../fixtures/oci-layout.js')
  const { layerByBlobKey, layerByDiffKey } = await import('../format/keys.js')
  const tar = buildLayerTar([dir('lib'), largeFile('lib/big.so', 1024 * 1024, 'shared-base')])
  const top = buildLayerTar([file('app.txt', 'task 1')])
  const info = await writeOciLayout(join(d, 'img'), { layers: [{ tar }, { tar: top }] })
  const store = new FaultyObjectStore(new MemoryObjectStore())
  const o = { ...opts(new MemoryObjectStore()), store }
  const first = await pushImage(join(d, 'img'), ref, o)
  t.notOk(first.layers[0]!.skipped)
  const again = await pushImage(join(d, 'img'), parseRef('test/img:again'), o)
  t.same(again.layers.map(l => l.skipped), [true, true], 'both layers recognised without reading them')
  t.same(again.layers.map(l => l.skippedBy), ['blob', 'blob'], 'by their blob digests (layer-by-blob)')
  t.equal(again.manifest, first.manifest, 'the same manifest')
  await store.delete(layerByBlobKey(digestHex(info.layers[0]!.digest)))
  const byDiff = await pushImage(join(d, 'img'), parseRef('test/img:by-diff'), o)
  t.equal(byDiff.layers[0]!.skippedBy, 'diff', 'without the blob hint, by its diff_id')
  t.ok(await store.stat(layerByBlobKey(digestHex(info.layers[0]!.digest))), 'and the blob hint is recorded again')
  // Hints that name the other layer's TOC must not be believed.
  const diffHex = digestHex(info.layers[0]!.diffId)
  await store.put(layerByDiffKey(diffHex), Buffer.from(first.layers[1]!.digest))
  await store.put(layerByBlobKey(digestHex(info.layers[0]!.digest)), Buffer.from(first.layers[1]!.digest))
  const third = await pushImage(join(d, 'img'), parseRef('test/img:third'), o)
  t.notOk(third.layers[0]!.skipped, 'hints whose TOC records another diff_id are ignored')
  t.equal(third.layers[0]!.digest, first.layers[0]!.digest, 'and the layer is read and stored as before')
})

t.test('pushSource() of a directory whose file shrinks after the walk saw it fails naming the file, and changes no ref', async t => {
  // The walk hands small files to a worker by path; the worker must catch the change.
  const store = new MemoryObjectStore()
  for (const workers of [0, 2]) {
    const d = t.testdir({ tree: { a: 'a'.repeat(5_000), big: 'x'.repeat(100_000), z: 'z' } })
    const source = openDirectory(join(d, 'tree'), ingestContext())
    const layer = source.layers[0]!
    const shrinking: LayerSource = {
      name: layer.name,
      diffId: () => layer.diffId(),
      async * entries () {
        for await (const e of layer.entries()) {
          if (e.header.path === 'big') { t.ok(e.file, 'the walk offers the file by path'); truncateSync(join(d, 'tree', 'big'), 10) }
          yield e
        }
      }
    }
    await t.rejects(pushSource({ ...source, layers: [shrinking] }, ref, { ...opts(store), workers }),
      { name: 'BadInputError', message: /directory .*tree, layer 1 of 1: "big": shrank from 100000 to 10 bytes while being read/ })
    t.equal(await readRef(store, ref), undefined, `workers: ${workers}: no ref`)
  }
})

t.test('pushImage() hands opened() the source, its kind known, before reading it', async t => {
  const d = t.testdir({ tree: { 'a.txt': 'hello' } })
  const tar = join(d, 'layer.tar')
  await writeFile(tar, buildLayerTar([file('b.txt', 'tar')]))
  const store = new FaultyObjectStore(new MemoryObjectStore())
  const seen: Array<{ kind: string, putsSoFar: number }> = []
  const opened = (source: { kind: string }): void => { seen.push({ kind: source.kind, putsSoFar: store.putKeys.length }) }
  await pushImage(join(d, 'tree'), ref, { ...opts(new MemoryObjectStore()), store, opened })
  await pushImage(tar, ref, { ...opts(new MemoryObjectStore()), store, opened })
  t.same(seen.map(s => s.kind), ['directory', 'rootfs-tar'], 'once per push, with the detected kind')
  t.equal(seen[0]!.putsSoFar, 0, 'called before the first push wrote anything')
})
