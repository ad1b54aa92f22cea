/**
 * classifyS3Error(): the one place where failures of @aws-sdk/client-s3
 * (service errors, HTTP status codes, socket and timeout errors, credential
 * errors) become LayerdErrors:
 *
 * | failure                                        | error                  |
 * |------------------------------------------------|------------------------|
 * | NoSuchKey; 404 on HEAD (stat)                  | NotFoundError          |
 * | 416 InvalidRange (getRange past the end)       | CorruptObjectError     |
 * | NoSuchBucket, 403 AccessDenied, bad signature, | UsageError (the store  |
 * |   missing credentials, a bare 404 on GET (not  |   configuration is wrong; |
 * |   an S3 endpoint), other 4xx                   |   retrying will not help) |
 * | 5xx, 429/503 throttling, RequestTimeout,       | StoreUnavailableError  |
 * |   socket errors, timeouts, anything unknown    |   (retrying may help)  |
 *
 * Note: AWS answers 403 instead of 404 for a missing key when the
 * credentials lack s3:ListBucket; grant it so misses are NotFoundError.
 *
 * May import: src/errors.ts, ./object-key.ts.
 */
import {
  CorruptObjectError, LayerdError, NotFoundError, StoreUnavailableError, UsageError
} from '../errors.js'
import { notFoundMessage } from './object-key.js'

export type S3StoreOp = 'get' | 'getRange' | 'put' | 'stat' | 'list' | 'delete'

interface SdkErrorShape {
  name?: string
  code?: string
  Code?: string
  message?: string
  $fault?: 'client' | 'server'
  $metadata?: { httpStatusCode?: number }
  $retryable?: unknown
}

/** Node socket and DNS error codes that mean "could not reach the endpoint". */
const NETWORK_ERROR_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN',
  'EHOSTUNREACH', 'ENETUNREACH', 'ENETDOWN', 'EHOSTDOWN', 'ERR_STREAM_PREMATURE_CLOSE', 'UND_ERR_SOCKET'
])

const CONFIG_ERROR_HINTS: Record<string, string> = {
  NoSuchBucket: 'the bucket does not exist',
  AccessDenied: 'access denied (check the AWS credentials and the bucket policy)',
  InvalidAccessKeyId: 'the AWS access key id is not known to the endpoint',
  SignatureDoesNotMatch: 'the request signature does not match (check AWS_SECRET_ACCESS_KEY and the region)',
  AuthorizationHeaderMalformed: 'the authorization header is malformed (check the region)',
  PermanentRedirect: 'the bucket lives at another endpoint or region',
  CredentialsProviderError: 'no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)'
}

/**
 * The LayerdError for a failure of `op` on `key` (a store-relative key, or
 * the list prefix) in the store at `storeUrl`. Synchronous, never throws.
 * LayerdErrors pass through unchanged.
 */
export function classifyS3Error (err: unknown, op: S3StoreOp, key: string, storeUrl: string): LayerdError {
  if (err instanceof LayerdError) return err
  const e = (typeof err === 'object' && err !== null ? err : {}) as SdkErrorShape
  const name = e.name ?? ''
  const code = e.Code ?? e.code ?? ''
  const status = e.$metadata?.httpStatusCode
  const what = `cannot ${op} ${key} in store ${storeUrl}`
  const detail = [name || code, status].filter(x => x !== undefined && x !== '').join(' ')
  const cause = { cause: err }

  if (name === 'NoSuchBucket' || code === 'NoSuchBucket') {
    return new UsageError(`${what}: ${CONFIG_ERROR_HINTS.NoSuchBucket} (${detail})`, cause)
  }
  // GET answers a missing key with a NoSuchKey body; HEAD has no body, so a
  // bare 404 means "missing" only for stat. A bare 404 on GET comes from
  // something that is not S3 (a wrong endpoint, a proxy): not a miss.
  if (name === 'NoSuchKey' || code === 'NoSuchKey' || (status === 404 && op === 'stat')) {
    return new NotFoundError(notFoundMessage(key, storeUrl), cause)
  }
  if (status === 404) {
    return new UsageError(`${what}: the endpoint answered 404 without an S3 error code; is the S3 endpoint right? (${detail})`, cause)
  }
  if (name === 'InvalidRange' || status === 416) {
    return new CorruptObjectError(`${what}: the object is shorter than the range asked for (${detail})`, cause)
  }
  const hint = CONFIG_ERROR_HINTS[name] ?? CONFIG_ERROR_HINTS[code]
  if (hint !== undefined) return new UsageError(`${what}: ${hint} (${detail})`, cause)

  if (status !== undefined) {
    const throttled = status === 429 || status === 503 || name === 'SlowDown' || name === 'RequestTimeout'
    if (status >= 500 || throttled) {
      return new StoreUnavailableError(`${what}: the endpoint answered with an error (${detail})`, cause)
    }
    if (status >= 400) return new UsageError(`${what}: the endpoint refused the request (${detail}: ${firstLine(e.message)})`, cause)
  }
  if (name === 'TimeoutError' || name === 'AbortError' || NETWORK_ERROR_CODES.has(code)) {
    const reason = firstLine(e.message).replace(/^@smithy\/node-http-handler - (\[ERROR\] )?/, '')
    const label = NETWORK_ERROR_CODES.has(code) && code !== 'ETIMEDOUT' ? code : name === 'TimeoutError' ? 'timed out' : code || name
    return new StoreUnavailableError(`${what}: the endpoint did not answer (${label}: ${reason})`, cause)
  }
  // Unknown failures (a proxy's HTML error page, a truncated body, ...) are
  // treated as transient: the retry layer bounds the cost of being wrong.
  return new StoreUnavailableError(`${what}: ${detail !== '' ? `${detail}: ` : ''}${firstLine(e.message ?? String(err))}`, cause)
}

function firstLine (message: string | undefined): string {
  return (message ?? '').split('\n')[0] ?? ''
}
