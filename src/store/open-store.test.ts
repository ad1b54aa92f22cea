import t from 'tap'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { startS3rver } from '../../fixtures/s3rver.js'
import { UsageError } from '../errors.js'
import { FsObjectStore } from './fs-object-store.js'
import { openStore, parseStoreUrl } from './open-store.js'
import { RetryingObjectStore } from './retrying-object-store.js'
import { S3ObjectStore } from './s3-object-store.js'

t.test('parseStoreUrl() accepts file:///path and s3://bucket[/prefix]', async t => {
  t.same(parseStoreUrl('file:///var/lib/layerd/store'), { kind: 'file', root: '/var/lib/layerd/store' })
  t.same(parseStoreUrl('file://localhost/srv/x'), { kind: 'file', root: '/srv/x' })
  t.same(parseStoreUrl('file:///with%20space/'), { kind: 'file', root: '/with space/' })
  t.same(parseStoreUrl('s3://my-bucket'), { kind: 's3', bucket: 'my-bucket', prefix: '' })
  t.same(parseStoreUrl('s3://my.bucket/'), { kind: 's3', bucket: 'my.bucket', prefix: '' })
  t.same(parseStoreUrl('s3://bkt/a/b/'), { kind: 's3', bucket: 'bkt', prefix: 'a/b' })
})

t.test('parseStoreUrl() rejects malformed URLs with a UsageError naming the URL and the accepted forms', async t => {
  for (const url of [
    '', '/plain/path', 'file://relative/path', 'file:relative', 'file:///a?x=1', 'http://host/x', 'S3://bkt',
    's3://', 's3://ab', 's3://Upper', 's3://under_score', 's3://bkt/a//b', 's3://bkt/../x', 's3://bkt/x?y'
  ]) {
    t.throws(() => parseStoreUrl(url), UsageError, url)
    t.throws(() => parseStoreUrl(url), { message: `invalid store URL ${JSON.stringify(url)}` })
    t.throws(() => parseStoreUrl(url), { message: /expected file:\/\/\/absolute\/path or s3:\/\/bucket\[\/prefix\]$/ })
  }
})

t.test('openStore() wraps the backend for the URL in RetryingObjectStore', async t => {
  const root = t.testdir()
  const fsStore = openStore(pathToFileURL(root).href)
  t.ok(fsStore instanceof RetryingObjectStore)
  t.ok((fsStore as RetryingObjectStore).inner instanceof FsObjectStore)
  t.equal(fsStore.url, pathToFileURL(root).href)
  await fsStore.put('k', Buffer.from('v'))
  t.equal((await fsStore.get('k')).toString(), 'v')
  await fsStore.close()
  const bare = openStore(pathToFileURL(root).href, { retry: false })
  t.ok(bare instanceof FsObjectStore, 'retry: false returns the bare backend')
  t.equal((await bare.get('k')).toString(), 'v')
  await bare.close()
  const s3Store = openStore('s3://bkt/pre/fix', { s3Endpoint: 'http://127.0.0.1:9' })
  t.ok((s3Store as RetryingObjectStore).inner instanceof S3ObjectStore)
  t.equal(s3Store.url, 's3://bkt/pre/fix')
  await s3Store.close()
})

t.test('openStore() rejects a malformed S3 endpoint with UsageError', async t => {
  t.throws(() => openStore('s3://bkt', { s3Endpoint: 'localhost:9000' }), { name: 'UsageError', message: /invalid S3 endpoint "localhost:9000"/ })
  t.throws(() => openStore('s3://bkt', { s3Endpoint: 'ftp://x' }), UsageError)
})

t.test('openStore() of an s3:// URL talks to the endpoint with credentials from the environment', async t => {
  const s3 = await startS3rver(join(t.testdir(), 'data'))
  const store = openStore(`s3://${s3.bucket}/images`, { s3Endpoint: s3.endpoint })
  t.teardown(async () => { await store.close(); await s3.stop() })
  await store.put('refs/x/latest', Buffer.from('manifest'))
  t.equal((await store.get('refs/x/latest')).toString(), 'manifest')
  t.equal((await store.stat('refs/x/latest'))?.size, 8)
})

t.test('openStore() stores report their backend\'s remote capability through every decorator, metered and retrying', async t => {
  const root = t.testdir()
  for (const options of [{}, { metered: true }, { metered: true, retry: false as const }, { retry: false as const }]) {
    t.equal(openStore(pathToFileURL(root).href, options).remote === true, false, `file:// ${JSON.stringify(options)}`)
    t.equal(openStore('s3://layerd-remote-check/p', { ...options, s3Endpoint: 'http://127.0.0.1:9' }).remote, true, `s3:// ${JSON.stringify(options)}`)
  }
})

t.test('S3ObjectStore.warm() loads its client without a request, and never throws', async t => {
  const store = openStore('s3://layerd-warm-check/p', { s3Endpoint: 'http://127.0.0.1:9', metered: true })
  await t.resolves(store.warm!())
  await store.close()
  await t.resolves(store.warm!(), 'a closed store does nothing')
})
