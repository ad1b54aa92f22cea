import t from 'tap'
import { startRadosgw } from '../../fixtures/radosgw.js'
import { UsageError } from '../errors.js'
import { runObjectStoreConformance } from './conformance.js'
import { S3ObjectStore } from './s3-object-store.js'

// One gateway for the file: a real S3 engine (Ceph's radosgw on a one-node memstore cluster, fixtures/radosgw.ts).
// Unlike s3rver it checks every SigV4 signature and replaces objects atomically, so nothing is skipped here.
const rgw = await startRadosgw(t.testdir())
t.teardown(() => rgw.stop())
t.comment(`radosgw answered in ${rgw.startMs} ms (${JSON.stringify(rgw.stepMs)})`)

for (const reads of ['http', 'sdk'] as const) {
  t.test(`S3ObjectStore passes the ObjectStore conformance suite against radosgw, reads through ${reads === 'http' ? 'S3HttpReader' : 'the SDK'}`, async t => {
    let n = 0
    runObjectStoreConformance(t, async () => {
      const store = new S3ObjectStore({ bucket: rgw.bucket, prefix: `conf-${reads}${n++}/x`, endpoint: rgw.endpoint, credentials: rgw.credentials, reads })
      t.equal(store.reads, reads)
      return { store, cleanup: async () => {} }
    })
  })
}

t.test('S3ObjectStore signs requests that radosgw verifies, and a wrong key is refused as UsageError', async t => {
  const good = new S3ObjectStore({ bucket: rgw.bucket, prefix: 'signed', endpoint: rgw.endpoint, credentials: rgw.credentials })
  t.teardown(() => good.close())
  t.equal(good.reads, 'http', 'static credentials: reads through our own signer (sigv4.ts)')
  await good.put('dir/a b+c', Buffer.from('0123456789'))
  t.equal((await good.getRange('dir/a b+c', 2, 5)).toString(), '23456', 'a range GET of a key that needs encoding, signature checked')
  t.equal((await good.get('dir/a b+c')).toString(), '0123456789')

  for (const reads of ['http', 'sdk'] as const) {
    const wrongSecret = new S3ObjectStore({ bucket: rgw.bucket, prefix: 'signed', endpoint: rgw.endpoint, reads, credentials: { ...rgw.credentials, secretAccessKey: 'not-the-secret' } })
    t.teardown(() => wrongSecret.close())
    await t.rejects(wrongSecret.get('dir/a b+c'), { name: 'UsageError', message: /cannot get dir\/a b\+c in store s3:\/\/[^ ]+: the request signature does not match .*\(SignatureDoesNotMatch 403\)/ },
      `${reads}: a wrong secret fails the signature check (s3rver would not notice)`)
    await t.rejects(wrongSecret.getRange('dir/a b+c', 0, 1), UsageError)
    const unknownKey = new S3ObjectStore({ bucket: rgw.bucket, prefix: 'signed', endpoint: rgw.endpoint, reads, credentials: { accessKeyId: 'NOT-A-KEY', secretAccessKey: 'x' } })
    t.teardown(() => unknownKey.close())
    await t.rejects(unknownKey.get('dir/a b+c'), { name: 'UsageError', message: /InvalidAccessKeyId 403/ }, `${reads}: an unknown access key`)
  }
  const writer = new S3ObjectStore({ bucket: rgw.bucket, prefix: 'signed', endpoint: rgw.endpoint, credentials: { ...rgw.credentials, secretAccessKey: 'not-the-secret' } })
  t.teardown(() => writer.close())
  await t.rejects(writer.put('dir/forged', Buffer.from('x')), { name: 'UsageError', message: /SignatureDoesNotMatch 403/ }, 'a write with a wrong secret is refused')
  t.equal(await good.stat('dir/forged'), undefined, 'and wrote nothing')
})
