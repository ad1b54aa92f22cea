import t from 'tap'
import { startS3rver } from '../../fixtures/s3rver.js'
import { StoreUnavailableError, UsageError } from '../errors.js'
import { blobKey } from '../format/keys.js'
import { S3ObjectStore } from '../store/s3-object-store.js'
import { ChunkFetcher } from './chunk-fetcher.js'
import { MemoryChunkCache } from './memory-chunk-cache.js'

t.test('ChunkFetcher.read() from an S3 store that refuses our credentials reports access denied, not "store unavailable"', async t => {
  const s3 = await startS3rver(t.testdir())
  const good = new S3ObjectStore({ bucket: s3.bucket, endpoint: s3.endpoint })
  const refused = new S3ObjectStore({ bucket: s3.bucket, endpoint: s3.endpoint, credentials: { accessKeyId: 'NOT-AN-S3RVER-KEY', secretAccessKey: 'S3RVER' } })
  const cache = new MemoryChunkCache({ maintenanceIntervalMs: 0 })
  const fetcher = new ChunkFetcher(refused, cache)
  t.teardown(async () => { await fetcher.close(); await cache.close(); await good.close(); await refused.close(); await s3.stop() })
  const blob = 'ab'.repeat(32)
  await good.put(blobKey(blob), Buffer.alloc(64, 1))
  const ref = { digest: 'cd'.repeat(32), blob, offset: 0, compressedLength: 64, length: 64 }
  const err = await fetcher.read([ref]).catch(e => e)
  t.type(err, UsageError, 'the store classified it (s3-errors.ts): a configuration problem, not retried')
  t.notOk(err instanceof StoreUnavailableError)
  t.match(err.message, `cannot fetch chunk ${ref.digest} (blob ${blob} bytes 0+64) from store ${refused.url}: `)
  t.match(err.message, 'the AWS access key id is not known to the endpoint (InvalidAccessKeyId 403)')
  t.type(err.cause, UsageError, "the store's error is the cause")
  t.equal(fetcher.stats.storeErrors, 1)
})
