import t from 'tap'
import { CorruptObjectError, NotFoundError, StoreUnavailableError, UsageError } from '../errors.js'
import { classifyS3Error } from './s3-errors.js'

const URL = 's3://bkt/pre'
/** An error shaped like the SDK's service exceptions. */
const serviceError = (name: string, status: number): Error =>
  Object.assign(new Error(`${name} message`), { name, $fault: status >= 500 ? 'server' : 'client', $metadata: { httpStatusCode: status } })
const socketError = (code: string): Error => Object.assign(new Error(`connect ${code}`), { code })

t.test('classifyS3Error() maps S3 answers, socket errors and timeouts to LayerdErrors', async t => {
  const cases: Array<[string, unknown, 'get' | 'getRange' | 'stat' | 'put' | 'list', new (...a: never[]) => Error]> = [
    ['NoSuchKey on GET', serviceError('NoSuchKey', 404), 'get', NotFoundError],
    ['bare 404 on HEAD', serviceError('NotFound', 404), 'stat', NotFoundError],
    ['bare 404 on GET (not an S3 endpoint)', serviceError('NotFound', 404), 'get', UsageError],
    ['NoSuchBucket', serviceError('NoSuchBucket', 404), 'get', UsageError],
    ['InvalidRange', serviceError('InvalidRange', 416), 'getRange', CorruptObjectError],
    ['AccessDenied', serviceError('AccessDenied', 403), 'put', UsageError],
    ['SignatureDoesNotMatch', serviceError('SignatureDoesNotMatch', 403), 'get', UsageError],
    ['missing credentials', Object.assign(new Error('Could not load credentials'), { name: 'CredentialsProviderError' }), 'get', UsageError],
    ['other 4xx', serviceError('InvalidArgument', 400), 'put', UsageError],
    ['InternalError 500', serviceError('InternalError', 500), 'get', StoreUnavailableError],
    ['SlowDown 503', serviceError('SlowDown', 503), 'put', StoreUnavailableError],
    ['429', serviceError('TooManyRequests', 429), 'list', StoreUnavailableError],
    ['RequestTimeout 400', serviceError('RequestTimeout', 400), 'put', StoreUnavailableError],
    ['ECONNREFUSED', socketError('ECONNREFUSED'), 'get', StoreUnavailableError],
    ['ECONNRESET', socketError('ECONNRESET'), 'get', StoreUnavailableError],
    ['ENOTFOUND', socketError('ENOTFOUND'), 'get', StoreUnavailableError],
    ['TimeoutError', Object.assign(new Error('@smithy/node-http-handler - [ERROR] a request has exceeded the configured 30000 ms requestTimeout.'), { name: 'TimeoutError', code: 'ETIMEDOUT' }), 'get', StoreUnavailableError],
    ['unknown', new Error('something odd'), 'get', StoreUnavailableError],
    ['not an Error', 'a string', 'get', StoreUnavailableError]
  ]
  for (const [name, err, op, Class] of cases) {
    const classified = classifyS3Error(err, op, 'blobs/k', URL)
    t.ok(classified instanceof Class, `${name} -> ${Class.name}`, { found: classified })
    t.equal(classified.cause, err, `${name}: the cause is kept`)
  }
})

t.test('classifyS3Error() messages name the operation, the key and the store', async t => {
  t.equal(classifyS3Error(serviceError('NoSuchKey', 404), 'get', 'blobs/k', URL).message, 'object blobs/k not found in store s3://bkt/pre')
  t.equal(classifyS3Error(serviceError('AccessDenied', 403), 'put', 'blobs/k', URL).message,
    'cannot put blobs/k in store s3://bkt/pre: access denied (check the AWS credentials and the bucket policy) (AccessDenied 403)')
  t.equal(classifyS3Error(socketError('ECONNREFUSED'), 'get', 'blobs/k', URL).message,
    'cannot get blobs/k in store s3://bkt/pre: the endpoint did not answer (ECONNREFUSED: connect ECONNREFUSED)')
  t.equal(classifyS3Error(Object.assign(new Error('@smithy/node-http-handler - [ERROR] a request has exceeded the configured 500 ms requestTimeout.'), { name: 'TimeoutError', code: 'ETIMEDOUT' }), 'stat', 'k', URL).message,
    'cannot stat k in store s3://bkt/pre: the endpoint did not answer (timed out: a request has exceeded the configured 500 ms requestTimeout.)')
})

t.test('classifyS3Error() passes LayerdErrors through unchanged', async t => {
  const original = new NotFoundError('already classified')
  t.equal(classifyS3Error(original, 'get', 'k', URL), original)
})
