/**
 * Issue 2's acceptance: the real Debian images push and export bit-exactly
 * on the fs and S3 backends, and version 2 uploads only its new chunks.
 */
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { startS3rver, S3RVER_CREDENTIALS } from '../../fixtures/s3rver.js'
import { compareTrees, snapshotTar, snapshotTree } from '../../fixtures/tree-compare.js'
import { MemoryChunkCache } from '../cache/memory-chunk-cache.js'
import { ChunkFetcher } from '../cache/chunk-fetcher.js'
import { parseRef } from '../format/ref.js'
import { loadImage } from '../image/load-image.js'
import { pushImage, type PushResult } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import type { ObjectStore } from '../store/object-store.js'
import { openStore } from '../store/open-store.js'
import { exportImage, type ExportTarget } from './export-image.js'

const images = await ensureDebianImages()
const rootfs = (name: 'base' | 'python-v1' | 'python-v2'): string => images.images[name].rootfs
const snapshots = new Map<string, Awaited<ReturnType<typeof snapshotTree>>>()
const expected = async (name: 'base' | 'python-v1' | 'python-v2') => {
  if (!snapshots.has(name)) snapshots.set(name, await snapshotTree(rootfs(name)))
  return snapshots.get(name)!
}

async function roundTrip (t: Test, work: string, store: ObjectStore, inputs: Array<{ src: string, ref: string, tree: 'base' | 'python-v1' | 'python-v2', as: 'dir' | 'tar' }>): Promise<PushResult[]> {
  const db = openMemoryNodeDb()
  const results: PushResult[] = []
  for (const input of inputs) {
    const pushed = await pushImage(input.src, parseRef(input.ref), { store, db })
    results.push(pushed)
    const fetcher = new ChunkFetcher(store, new MemoryChunkCache())
    const image = await loadImage(store, input.ref)
    const out = join(work, `out-${results.length}`)
    const target: ExportTarget = input.as === 'dir' ? { directory: out } : { tarFile: `${out}.tar` }
    await exportImage(image, fetcher, target)
    await fetcher.close()
    const got = input.as === 'dir' ? await snapshotTree(out) : await snapshotTar(`${out}.tar`)
    const diff = compareTrees(await expected(input.tree), got, { labels: ['source', 'export'] })
    t.same(diff, [], `${input.ref} from ${input.src.split('/').pop()} exports exactly as ${input.as} (${got.size} paths)`)
  }
  return results
}



t.test('push + export round-trips the Debian images exactly on the fs store', async t => {
  const work = t.testdir()
  const store = openStore(`file://${work}/store`)
  t.teardown(() => store.close())
  const [v1, v2] = await roundTrip(t, work, store, [
    { src: images.images['python-v1'].dockerArchive, ref: 'deb/python:v1', tree: 'python-v1', as: 'dir' },
    { src: images.images['python-v2'].ociLayout, ref: 'deb/python:v2', tree: 'python-v2', as: 'tar' },
    { src: images.baseRootfsTar.zstd, ref: 'deb/base:v1', tree: 'base', as: 'dir' }
  ])
  const v1Bytes = v1!.uploadedBytes
  t.ok(v2!.uploadedBytes < 0.03 * v1Bytes, `python v2 uploaded ${v2!.uploadedBytes} bytes against ${v1Bytes} for v1`)
  t.equal(v2!.layers[0]!.newPlainBytes, 0, 'the shared base layer uploads nothing')
})

t.test('push + export round-trips the Debian images exactly on the S3 store (s3rver)', async t => {
  const work = t.testdir()
  const s3 = await startS3rver(join(work, 's3'))
  t.teardown(() => s3.stop())
  process.env.AWS_ACCESS_KEY_ID = S3RVER_CREDENTIALS.accessKeyId
  process.env.AWS_SECRET_ACCESS_KEY = S3RVER_CREDENTIALS.secretAccessKey
  const store = openStore(`s3://${s3.bucket}/layerd`, { s3Endpoint: s3.endpoint })
  t.teardown(() => store.close())
  const [v1, v2] = await roundTrip(t, work, store, [
    { src: images.pythonV1OciArchive, ref: 'deb/python:v1', tree: 'python-v1', as: 'dir' },
    { src: images.images['python-v2'].dockerArchive, ref: 'deb/python:v2', tree: 'python-v2', as: 'dir' }
  ])
  t.ok(v2!.uploadedBytes < 0.03 * v1!.uploadedBytes, `python v2 uploaded ${v2!.uploadedBytes} bytes against ${v1!.uploadedBytes} for v1`)
})
