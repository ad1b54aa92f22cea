/**
 * openStore(): turns a store URL (`--store` / LAYERD_STORE) into a ready
 * ObjectStore: the backend for the URL, wrapped in RetryingObjectStore.
 *
 * Accepted forms:
 * - `file:///abs/path` (or `file://localhost/abs/path`): FsObjectStore
 * - `s3://bucket` or `s3://bucket/prefix`: S3ObjectStore; endpoint from
 *   `s3Endpoint` (`--s3-endpoint` / LAYERD_S3_ENDPOINT), the rest from the
 *   standard AWS environment variables
 *
 * May import: src/errors.ts, the store modules in this folder.
 */
import { fileURLToPath } from 'node:url'
import { UsageError } from '../errors.js'
import { FsObjectStore, type FsObjectStoreOptions } from './fs-object-store.js'
import { objectKeyProblem } from './object-key.js'
import type { ObjectStore } from './object-store.js'
import { MeteredObjectStore } from './metered-object-store.js'
import { RetryingObjectStore, type RetryOptions } from './retrying-object-store.js'
import { S3ObjectStore, type S3ObjectStoreOptions } from './s3-object-store.js'

export const ACCEPTED_STORE_URL_FORMS = 'file:///absolute/path or s3://bucket[/prefix]'

export interface OpenStoreOptions {
  /** S3 endpoint URL, e.g. `http://127.0.0.1:9000`; undefined means AWS. */
  s3Endpoint?: string
  /** Retry policy; `false` returns the bare backend (one attempt per call). */
  retry?: RetryOptions | false
  /** Timeouts, credentials and the like for an s3:// store. */
  s3?: Omit<S3ObjectStoreOptions, 'bucket' | 'prefix' | 'endpoint'>
  /** Count each backend request in the process's metrics (src/metrics/counters.ts); the daemon sets it. */
  metered?: boolean
  /** Options for a file:// store. */
  fs?: FsObjectStoreOptions
}

export type ParsedStoreUrl =
  | { kind: 'file', root: string }
  | { kind: 's3', bucket: string, prefix: string }

// S3 bucket naming rules: 3-63 characters, lowercase letters, digits, dots
// and hyphens, starting and ending with a letter or digit.
const BUCKET_RE = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/
const S3_URL_RE = /^s3:\/\/([^/?#]*)(\/[^?#]*)?$/

/** Parses a store URL without opening anything. Synchronous; throws UsageError. */
export function parseStoreUrl (url: string): ParsedStoreUrl {
  const bad = (why: string): UsageError =>
    new UsageError(`invalid store URL ${JSON.stringify(url)}: ${why}; expected ${ACCEPTED_STORE_URL_FORMS}`)
  if (typeof url !== 'string' || url === '') throw bad('it is empty')
  if (url.startsWith('file:')) {
    if (!url.startsWith('file:///') && !url.startsWith('file://localhost/')) throw bad('a file URL needs an absolute path (three slashes)')
    let root: string
    try { root = fileURLToPath(url) } catch (err) { throw bad(`not a valid file URL (${(err as Error).message})`) }
    if (url.includes('?') || url.includes('#')) throw bad('query and fragment are not allowed')
    return { kind: 'file', root }
  }
  if (url.startsWith('s3:')) {
    const match = S3_URL_RE.exec(url)
    if (match === null) throw bad('an S3 URL is s3://bucket/prefix, without query or fragment')
    const bucket = match[1] ?? ''
    if (!BUCKET_RE.test(bucket) || bucket.includes('..')) {
      throw bad(`bucket name ${JSON.stringify(bucket)} must be 3-63 lowercase letters, digits, dots or hyphens`)
    }
    const prefix = (match[2] ?? '').replace(/^\/+|\/+$/g, '')
    const problem = prefix === '' ? undefined : objectKeyProblem(prefix)
    if (problem !== undefined) throw bad(`prefix ${JSON.stringify(prefix)}: ${problem}`)
    return { kind: 's3', bucket, prefix }
  }
  throw bad('unknown scheme')
}

/**
 * Opens the store at `url`. Synchronous and lazy: no I/O happens until the
 * first call, so an unreachable store fails on use, with StoreUnavailableError.
 * Throws UsageError for a malformed URL or s3Endpoint.
 */
export function openStore (url: string, options: OpenStoreOptions = {}): ObjectStore {
  const parsed = parseStoreUrl(url)
  let backend: ObjectStore
  if (parsed.kind === 'file') {
    backend = new FsObjectStore(parsed.root, options.fs)
  } else {
    const endpoint = options.s3Endpoint === undefined || options.s3Endpoint === '' ? undefined : checkEndpoint(options.s3Endpoint)
    backend = new S3ObjectStore({ ...options.s3, bucket: parsed.bucket, prefix: parsed.prefix, ...(endpoint !== undefined ? { endpoint } : {}) })
  }
  if (options.metered === true) backend = new MeteredObjectStore(backend)
  return options.retry === false ? backend : new RetryingObjectStore(backend, options.retry)
}

function checkEndpoint (endpoint: string): string {
  let parsed: URL | undefined
  try { parsed = new URL(endpoint) } catch { parsed = undefined }
  if (parsed === undefined || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || parsed.hostname === '') {
    throw new UsageError(`invalid S3 endpoint ${JSON.stringify(endpoint)}: expected http://host[:port] or https://host[:port]`)
  }
  return endpoint
}
