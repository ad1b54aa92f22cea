import t from 'tap'
import { createServer, type Socket } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { S3RVER_CREDENTIALS, startS3rver, type S3rverHandle } from '../../fixtures/s3rver.js'
import { NotFoundError, StoreUnavailableError, UsageError } from '../errors.js'
import { runObjectStoreConformance } from './conformance.js'
import { RetryingObjectStore } from './retrying-object-store.js'
import { S3ObjectStore } from './s3-object-store.js'
import { ThrottleProxy } from '../../bench/deploy/throttle-proxy.js'

/** Awaits `promise`, expecting a rejection; returns the error and how long it took. */
async function timeRejection (promise: Promise<unknown>): Promise<{ err: unknown, ms: number }> {
  const started = Date.now()
  try {
    await promise
  } catch (err) {
    return { err, ms: Date.now() - started }
  }
  throw new Error('expected the call to fail, but it succeeded')
}

// One endpoint for the tests that do not stop it; the others start their own.
const shared = await startS3rver(t.testdir())
t.teardown(() => shared.stop())

for (const reads of ['http', 'sdk'] as const) {
  t.test(`S3ObjectStore passes the ObjectStore conformance suite against s3rver, reads through ${reads === 'http' ? 'S3HttpReader' : 'the SDK'}`, async t => {
    const s3 = shared
    let n = 0
    runObjectStoreConformance(t, async () => {
      const store = new S3ObjectStore({ bucket: s3.bucket, prefix: `conf-${reads}${n++}/x`, endpoint: s3.endpoint, reads })
      t.equal(store.reads, reads)
      return { store, cleanup: async () => {} }
    }, { skip: { atomicOverwrite: 'unsupported here: s3rver streams an object file while a PUT rewrites it; AWS S3 and MinIO replace objects atomically' } })
  })
}

t.test('S3ObjectStore reads without the SDK when the credentials are static, and its signature is checked', async t => {
  const s3 = shared
  const fromEnv = new S3ObjectStore({ bucket: s3.bucket, prefix: 'signed', endpoint: s3.endpoint })
  t.teardown(() => fromEnv.close())
  t.equal(fromEnv.reads, 'http', 'AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (set by startS3rver) are static credentials')
  await fromEnv.put('dir/a b+c', Buffer.from('0123456789'))
  t.equal((await fromEnv.getRange('dir/a b+c', 2, 5)).toString(), '23456', 'a key that needs encoding, signed and read by range')
  // s3rver checks the access key but not a SigV4 signature (sigv4.test.ts checks the signature against AWS's example and the SDK's signer).
  const wrong = new S3ObjectStore({ bucket: s3.bucket, prefix: 'signed', endpoint: s3.endpoint, credentials: { accessKeyId: 'NOT-S3RVER', secretAccessKey: 'S3RVER' } })
  t.teardown(() => wrong.close())
  t.equal(wrong.reads, 'http')
  await t.rejects(wrong.get('dir/a b+c'), { name: 'UsageError', message: /cannot get dir\/a b\+c in store s3:\/\/[^ ]+: the AWS access key id is not known to the endpoint \(InvalidAccessKeyId 403\)/ })
  await t.rejects(wrong.getRange('dir/a b+c', 0, 1), UsageError)
})

t.test('S3ObjectStore.warm() opens the reads\' connection, so the first GET makes none', async t => {
  const s3 = shared
  const proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: s3.port, link: { bitsPerSecond: Infinity, rttMs: 0 } })
  const store = new S3ObjectStore({ bucket: s3.bucket, prefix: 'warm', endpoint: `http://${proxy.hostPort}` })
  t.teardown(async () => { await store.close(); await proxy.close() })
  await store.put('k', Buffer.from('warm'))
  const cold = new S3ObjectStore({ bucket: s3.bucket, prefix: 'warm', endpoint: `http://${proxy.hostPort}` })
  t.teardown(() => cold.close())
  const before = proxy.stats().connections
  await cold.warm()
  t.equal(proxy.stats().connections, before + 1, 'warm() connected once')
  t.equal((await cold.get('k')).toString(), 'warm')
  t.equal((await cold.getRange('k', 1, 2)).toString(), 'ar')
  t.equal(proxy.stats().connections, before + 1, 'the GETs reused that connection')
  const down = new S3ObjectStore({ bucket: s3.bucket, endpoint: 'http://127.0.0.1:1' })
  t.teardown(() => down.close())
  await down.warm()
  t.pass('warm() of an endpoint that refuses connections resolves; the first request reports it')
})

t.test('S3ObjectStore reads through the SDK when the credentials come from a profile file', async t => {
  const s3 = shared
  const profile = join(t.testdir(), 'credentials')
  await writeFile(profile, `[default]\naws_access_key_id = ${S3RVER_CREDENTIALS.accessKeyId}\naws_secret_access_key = ${S3RVER_CREDENTIALS.secretAccessKey}\n`)
  const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY, file: process.env.AWS_SHARED_CREDENTIALS_FILE }
  t.teardown(() => {
    process.env.AWS_ACCESS_KEY_ID = saved.id
    process.env.AWS_SECRET_ACCESS_KEY = saved.secret
    if (saved.file === undefined) delete process.env.AWS_SHARED_CREDENTIALS_FILE
    else process.env.AWS_SHARED_CREDENTIALS_FILE = saved.file
  })
  process.env.AWS_ACCESS_KEY_ID = ''
  process.env.AWS_SECRET_ACCESS_KEY = ''
  process.env.AWS_SHARED_CREDENTIALS_FILE = profile
  const store = new S3ObjectStore({ bucket: s3.bucket, prefix: 'profile', endpoint: s3.endpoint })
  t.teardown(() => store.close())
  t.equal(store.reads, 'sdk', 'no static credentials: the SDK\'s chain finds the profile')
  await store.put('k', Buffer.from('from a profile'))
  t.equal((await store.getRange('k', 5, 9)).toString(), 'a profile')
})

t.test('S3ObjectStore keeps its keys under its prefix', async t => {
  const s3 = await startS3rver(t.testdir(), { bucket: 'prefixes' })
  const one = new S3ObjectStore({ bucket: s3.bucket, prefix: 'one', endpoint: s3.endpoint })
  const two = new S3ObjectStore({ bucket: s3.bucket, prefix: '/two/', endpoint: s3.endpoint })
  const whole = new S3ObjectStore({ bucket: s3.bucket, endpoint: s3.endpoint })
  t.teardown(async () => { await one.close(); await two.close(); await whole.close(); await s3.stop() })
  t.equal(one.url, 's3://prefixes/one')
  t.equal(two.url, 's3://prefixes/two')
  t.equal(whole.url, 's3://prefixes')
  await one.put('k', Buffer.from('1'))
  await two.put('k', Buffer.from('2'))
  t.equal((await one.get('k')).toString(), '1')
  t.equal((await two.get('k')).toString(), '2')
  const keys: string[] = []
  for await (const key of whole.list('')) keys.push(key)
  t.same(keys.sort(), ['one/k', 'two/k'])
  const underOne: string[] = []
  for await (const key of one.list('')) underOne.push(key)
  t.same(underOne, ['k'])
})

t.test('S3ObjectStore throws StoreUnavailableError quickly when the endpoint stops mid-run', async t => {
  const s3 = await startS3rver(t.testdir())
  const store = new S3ObjectStore({ bucket: s3.bucket, endpoint: s3.endpoint })
  t.teardown(async () => { await store.close(); await s3.stop() })
  await store.put('k', Buffer.from('before'))
  t.equal((await store.get('k')).toString(), 'before', 'works while the endpoint is up (keep-alive socket open)')
  await s3.stop()
  for (const [name, call] of [
    ['get', () => store.get('k')], ['getRange', () => store.getRange('k', 0, 1)], ['put', () => store.put('k2', Buffer.from('x'))],
    ['stat', () => store.stat('k')], ['delete', () => store.delete('k')]
  ] as const) {
    const { err, ms } = await timeRejection(call())
    t.ok(err instanceof StoreUnavailableError, `${name}: StoreUnavailableError`, { found: err })
    t.ok(ms < 5000, `${name}: failed in ${ms} ms`)
  }
  const { err } = await timeRejection((async () => { for await (const key of store.list('')) t.fail(`listed ${key}`) })())
  t.ok(err instanceof StoreUnavailableError, 'list: StoreUnavailableError')
  t.match((err as Error).message, `cannot list  in store s3://${s3.bucket}: the endpoint did not answer (`)
})

t.test('S3ObjectStore times out with StoreUnavailableError when the endpoint accepts but never answers', async t => {
  const sockets = new Set<Socket>()
  const blackhole = createServer(socket => { sockets.add(socket); socket.on('error', () => {}) })
  await new Promise<void>(resolve => blackhole.listen(0, '127.0.0.1', resolve))
  const port = (blackhole.address() as { port: number }).port
  const store = new S3ObjectStore({ bucket: 'blackhole', endpoint: `http://127.0.0.1:${port}`, requestTimeoutMs: 300, idleTimeoutMs: 300 })
  t.teardown(async () => {
    await store.close()
    for (const socket of sockets) socket.destroy()
    await new Promise(resolve => blackhole.close(resolve))
  })
  for (const [name, call] of [['get', () => store.get('k')], ['put', () => store.put('k', Buffer.alloc(1000))], ['stat', () => store.stat('k')]] as const) {
    const { err, ms } = await timeRejection(call())
    t.ok(err instanceof StoreUnavailableError, `${name}: StoreUnavailableError`, { found: err })
    t.match((err as Error).message, /timed out: .*(timed out|exceeded)/)
    t.ok(ms < 3000, `${name}: gave up in ${ms} ms`)
  }
})

t.test('RetryingObjectStore over S3 gives up within its deadline when the endpoint is down', async t => {
  const s3 = await startS3rver(t.testdir())
  await s3.stop()
  const retries: number[] = []
  const store = new RetryingObjectStore(
    new S3ObjectStore({ bucket: s3.bucket, endpoint: s3.endpoint }),
    { maxAttempts: 1000, baseDelayMs: 20, maxDelayMs: 200, deadlineMs: 1000, onRetry: e => retries.push(e.attempt) })
  t.teardown(() => store.close())
  const { err, ms } = await timeRejection(store.get('k'))
  t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError', { found: err })
  t.match((err as Error).message, /gave up after \d+ attempts/)
  t.ok(ms <= 1000 + 2000, `gave up in ${ms} ms (deadline 1000 ms)`)
  t.ok(retries.length >= 3, `retried ${retries.length} times first`)
})

t.test('RetryingObjectStore over S3 rides out an endpoint restart', async t => {
  const dir = t.testdir()
  const first = await startS3rver(join(dir, 'data'))
  const store = new RetryingObjectStore(
    new S3ObjectStore({ bucket: first.bucket, endpoint: first.endpoint }),
    { maxAttempts: 50, baseDelayMs: 50, maxDelayMs: 200, deadlineMs: 10_000 })
  let second: S3rverHandle | undefined
  t.teardown(async () => { await store.close(); await second?.stop() })
  await store.put('k', Buffer.from('survives'))
  await first.stop()
  const restart = new Promise<void>(resolve => setTimeout(() => {
    void startS3rver(join(dir, 'data'), { port: first.port }).then(s => { second = s; resolve() })
  }, 500))
  t.equal((await store.get('k')).toString(), 'survives')
  await restart
})

t.test('S3ObjectStore reports a missing bucket as UsageError, which is not retried', async t => {
  const s3 = shared
  let retries = 0
  const store = new RetryingObjectStore(
    new S3ObjectStore({ bucket: 'no-such-bucket', endpoint: s3.endpoint }), { onRetry: () => { retries++ } })
  t.teardown(() => store.close())
  await t.rejects(store.get('k'), UsageError)
  await t.rejects(store.get('k'), { message: 'cannot get k in store s3://no-such-bucket: the bucket does not exist (NoSuchBucket 404)' })
  await t.rejects(store.put('k', Buffer.from('x')), UsageError)
  t.equal(retries, 0)
  const good = new S3ObjectStore({ bucket: s3.bucket, endpoint: s3.endpoint })
  t.teardown(() => good.close())
  await t.rejects(good.get('missing'), NotFoundError, 'a missing key in an existing bucket is NotFoundError')
})
