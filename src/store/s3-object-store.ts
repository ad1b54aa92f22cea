/**
 * S3ObjectStore: an ObjectStore in an S3 bucket under a key prefix
 * (`s3://bucket/prefix`), via @aws-sdk/client-s3. Works against AWS S3,
 * MinIO, Ceph RGW and s3rver by configuration alone: path-style addressing,
 * an optional endpoint, credentials and region from the standard AWS
 * environment (region defaults to us-east-1).
 *
 * Reads (get, getRange) go through S3HttpReader (plain keep-alive HTTP,
 * SigV4-signed: no SDK on the read path) when the credentials are static,
 * given in the options or in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
 * (+ AWS_SESSION_TOKEN); with any other credential source (profiles,
 * instance roles) they go through the SDK, as writes, stat, list and delete
 * always do.
 *
 * One attempt per call: the SDK's own retries are off (maxAttempts 1)
 * because RetryingObjectStore retries above. Connect, response and idle
 * timeouts make an unreachable or stalled endpoint fail fast with
 * StoreUnavailableError instead of hanging. Every failure goes through
 * classifyS3Error() (s3-errors.ts).
 *
 * May import: src/errors.ts, ./object-store.ts, ./object-key.ts,
 * ./s3-errors.ts, ./s3-http-reader.ts, @aws-sdk/client-s3.
 */
import type { S3Client, S3ClientConfig } from '@aws-sdk/client-s3'
import { CorruptObjectError, UsageError } from '../errors.js'
import {
  assertValidKey, assertValidPrefix, assertValidRange, shortObjectMessage
} from './object-key.js'
import { bodyBytes, type ObjectBody } from './object-body.js'
import type { ListedObject, ObjectStat, ObjectStore } from './object-store.js'
import { classifyS3Error, type S3StoreOp } from './s3-errors.js'
import { S3HttpReader } from './s3-http-reader.js'

export const DEFAULT_S3_REGION = 'us-east-1'

/**
 * A listed LastModified cut to the second, as stat() sees it: HEAD's
 * Last-Modified is an HTTP date (whole seconds), while ListObjectsV2 gives
 * milliseconds: `.000` from AWS, the real fraction from Ceph RGW. Cut, the
 * two reads of one write agree on every engine (gc compares them).
 */
function wholeSeconds (date: Date): Date {
  return new Date(Math.floor(date.getTime() / 1000) * 1000)
}
export const S3_CONNECT_TIMEOUT_MS = 3_000
/** Longest wait for response headers (and, for small requests, for the upload). */
export const S3_REQUEST_TIMEOUT_MS = 30_000
/** Longest silence on a socket while a body is streaming. */
export const S3_IDLE_TIMEOUT_MS = 30_000
/** Uploads get S3_REQUEST_TIMEOUT_MS plus one second per this many bytes. */
const MIN_UPLOAD_BYTES_PER_SECOND = 1024 * 1024
export const S3_MAX_SOCKETS = 64

export interface S3ObjectStoreOptions {
  bucket: string
  /** Key prefix inside the bucket, without leading or trailing `/`; '' for none. */
  prefix?: string
  /** e.g. `http://127.0.0.1:9000`; undefined means AWS's own endpoint for the region. */
  endpoint?: string
  /** Default: AWS_REGION, then AWS_DEFAULT_REGION, then us-east-1. */
  region?: string
  /** Default: the SDK's standard chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY first). */
  credentials?: { accessKeyId: string, secretAccessKey: string, sessionToken?: string }
  connectTimeoutMs?: number
  requestTimeoutMs?: number
  idleTimeoutMs?: number
  maxSockets?: number
  /** 'http' (the default when the credentials are static): reads through S3HttpReader; 'sdk': through the SDK. */
  reads?: 'http' | 'sdk'
}

/** Static credentials from the options, else from the standard AWS variables, else undefined (the SDK's chain decides). */
function staticCredentials (options: S3ObjectStoreOptions): S3ObjectStoreOptions['credentials'] {
  if (options.credentials !== undefined) return options.credentials
  const { AWS_ACCESS_KEY_ID: accessKeyId, AWS_SECRET_ACCESS_KEY: secretAccessKey, AWS_SESSION_TOKEN: sessionToken } = process.env
  if (accessKeyId === undefined || accessKeyId === '' || secretAccessKey === undefined || secretAccessKey === '') return undefined
  return { accessKeyId, secretAccessKey, ...(sessionToken !== undefined && sessionToken !== '' ? { sessionToken } : {}) }
}

export class S3ObjectStore implements ObjectStore {
  readonly url: string
  /** Every range GET is a round trip. */
  readonly remote = true
  readonly bucket: string
  readonly #keyPrefix: string
  readonly #config: S3ClientConfig
  #sdk: Promise<{ client: S3Client, sdk: typeof import('@aws-sdk/client-s3') }> | undefined
  readonly #requestTimeoutMs: number
  /** Reads without the SDK; undefined when the credentials are not static (or `reads: 'sdk'`). */
  readonly #reader: S3HttpReader | undefined
  #closed = false

  /** Synchronous, does no I/O. Throws UsageError for an empty bucket name. */
  constructor (options: S3ObjectStoreOptions) {
    if (options.bucket === '') throw new UsageError('S3ObjectStore needs a bucket name')
    const prefix = (options.prefix ?? '').replace(/^\/+|\/+$/g, '')
    this.bucket = options.bucket
    this.#keyPrefix = prefix === '' ? '' : `${prefix}/`
    this.url = `s3://${options.bucket}${prefix === '' ? '' : `/${prefix}`}`
    this.#requestTimeoutMs = options.requestTimeoutMs ?? S3_REQUEST_TIMEOUT_MS
    // The SDK warns once per process that it will need Node 22 in 2027; this
    // project pins Node 20, and CLI output must stay one line per error.
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
    const agent = { keepAlive: true, maxSockets: options.maxSockets ?? S3_MAX_SOCKETS }
    this.#config = {
      region: options.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? DEFAULT_S3_REGION,
      ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
      ...(options.credentials !== undefined ? { credentials: options.credentials } : {}),
      forcePathStyle: true,
      maxAttempts: 1,
      // Digests above verify content; the newer default CRC headers cost CPU
      // and are refused by some S3-compatible servers.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      requestHandler: {
        connectionTimeout: options.connectTimeoutMs ?? S3_CONNECT_TIMEOUT_MS,
        requestTimeout: this.#requestTimeoutMs,
        throwOnRequestTimeout: true,
        socketTimeout: options.idleTimeoutMs ?? S3_IDLE_TIMEOUT_MS,
        httpAgent: agent,
        httpsAgent: agent
      }
    }
    const credentials = options.reads === 'sdk' ? undefined : staticCredentials(options)
    this.#reader = credentials === undefined
      ? undefined
      : new S3HttpReader({
        endpoint: options.endpoint ?? `https://s3.${this.#config.region as string}.amazonaws.com`,
        bucket: options.bucket,
        region: this.#config.region as string,
        credentials,
        connectTimeoutMs: options.connectTimeoutMs ?? S3_CONNECT_TIMEOUT_MS,
        requestTimeoutMs: this.#requestTimeoutMs,
        idleTimeoutMs: options.idleTimeoutMs ?? S3_IDLE_TIMEOUT_MS,
        maxSockets: options.maxSockets ?? S3_MAX_SOCKETS
      })
  }

  /** How reads reach the endpoint: 'http' (S3HttpReader) or 'sdk'. */
  get reads (): 'http' | 'sdk' { return this.#reader === undefined ? 'sdk' : 'http' }

  /**
   * The SDK client, created on first use: importing @aws-sdk/client-s3
   * costs about 0.2 s of CPU, which every `layerctl` command on a file://
   * store would otherwise pay.
   */
  async #client (): Promise<{ client: S3Client, sdk: typeof import('@aws-sdk/client-s3') }> {
    this.#sdk ??= import('@aws-sdk/client-s3').then(sdk => ({ client: new sdk.S3Client(this.#config), sdk }))
    return await this.#sdk
  }

  /**
   * Get ready for the first read. With S3HttpReader: open its first
   * keep-alive connection. Otherwise: load the SDK, build the client and
   * resolve its credentials now, about 0.19 s that the first GET of a cold
   * daemon paid (measured: the ref GET of bench/cold-start's S3 row took
   * 188 ms, the next ones 10–25 ms). Async; never rejects.
   */
  async warm (): Promise<void> {
    if (this.#closed) return
    // Reads need no SDK (writes still load it on first use): open their first connection instead.
    if (this.#reader !== undefined) return await this.#reader.preconnect()
    try {
      const { client } = await this.#client()
      await client.config.credentials()
    } catch {
      // The first real request reports what is wrong, naming the store.
    }
  }

  /** One SDK command; the output is typed loosely (the SDK's command generics do not survive a lazy import). */
  async #send (make: (sdk: typeof import('@aws-sdk/client-s3')) => object, options?: { requestTimeout: number }): Promise<any> {
    const { client, sdk } = await this.#client()
    return await (client.send as (command: object, options?: object) => Promise<unknown>).call(client, make(sdk), options)
  }

  async get (key: string): Promise<Buffer> {
    this.#check('get', key)
    try {
      if (this.#reader !== undefined) return await this.#reader.get(this.#keyPrefix + key)
      const res = await this.#send(sdk => new sdk.GetObjectCommand({ Bucket: this.bucket, Key: this.#keyPrefix + key }))
      return await readBody(res.Body)
    } catch (err) {
      throw classifyS3Error(err, 'get', key, this.url)
    }
  }

  async getRange (key: string, offset: number, length: number): Promise<Buffer> {
    this.#check('getRange', key)
    assertValidRange(key, offset, length, this.url)
    if (length === 0) {
      // HTTP cannot ask for zero bytes; prove the object exists and reaches offset.
      const st = await this.stat(key)
      if (st === undefined) throw classifyS3Error({ name: 'NoSuchKey' }, 'getRange', key, this.url)
      if (st.size < offset) throw new CorruptObjectError(shortObjectMessage(key, this.url, offset, length, 0))
      return Buffer.alloc(0)
    }
    let data: Buffer
    try {
      if (this.#reader !== undefined) {
        data = await this.#reader.get(this.#keyPrefix + key, { offset, length })
      } else {
        const res = await this.#send(sdk => new sdk.GetObjectCommand({
          Bucket: this.bucket, Key: this.#keyPrefix + key, Range: `bytes=${offset}-${offset + length - 1}`
        }))
        data = await readBody(res.Body)
      }
    } catch (err) {
      throw classifyS3Error(err, 'getRange', key, this.url)
    }
    // A 206 past the end of the object is cut short; a server that ignores
    // Range sends the whole object (200), which is wrong too.
    if (data.length !== length) {
      throw new CorruptObjectError(shortObjectMessage(key, this.url, offset, length, data.length))
    }
    return data
  }

  async put (key: string, body: ObjectBody): Promise<void> {
    this.#check('put', key)
    const data = bodyBytes(body) // the SDK sends one buffer
    const requestTimeout = this.#requestTimeoutMs + Math.ceil(data.length / MIN_UPLOAD_BYTES_PER_SECOND) * 1000
    try {
      await this.#send(sdk => new sdk.PutObjectCommand({
        Bucket: this.bucket, Key: this.#keyPrefix + key, Body: data, ContentLength: data.length
      }), { requestTimeout })
    } catch (err) {
      throw classifyS3Error(err, 'put', key, this.url)
    }
  }

  async stat (key: string): Promise<ObjectStat | undefined> {
    this.#check('stat', key)
    try {
      const res = await this.#send(sdk => new sdk.HeadObjectCommand({ Bucket: this.bucket, Key: this.#keyPrefix + key }))
      return { size: res.ContentLength ?? 0, modified: res.LastModified instanceof Date ? res.LastModified : new Date(0) }
    } catch (err) {
      const classified = classifyS3Error(err, 'stat', key, this.url)
      if (classified.code === 'ERR_NOT_FOUND') return undefined
      throw classified
    }
  }

  async * list (prefix: string): AsyncIterable<string> {
    for await (const o of this.listObjects(prefix)) yield o.key
  }

  async * listObjects (prefix: string): AsyncIterable<ListedObject> {
    this.#assertOpen('list')
    assertValidPrefix(prefix, this.url)
    let continuationToken: string | undefined
    do {
      let objects: ListedObject[]
      try {
        const res = await this.#send(sdk => new sdk.ListObjectsV2Command({
          Bucket: this.bucket, Prefix: this.#keyPrefix + prefix, ContinuationToken: continuationToken
        }))
        objects = ((res.Contents ?? []) as Array<{ Key?: string, Size?: number, LastModified?: Date }>)
          .filter(o => (o.Key ?? '').startsWith(this.#keyPrefix))
          .map(o => ({ key: o.Key!.slice(this.#keyPrefix.length), size: o.Size ?? 0, modified: o.LastModified instanceof Date ? wholeSeconds(o.LastModified) : new Date(0) }))
        continuationToken = res.IsTruncated === true ? res.NextContinuationToken : undefined
      } catch (err) {
        throw classifyS3Error(err, 'list', prefix, this.url)
      }
      yield * objects
    } while (continuationToken !== undefined)
  }

  async delete (key: string): Promise<void> {
    this.#check('delete', key)
    try {
      await this.#send(sdk => new sdk.DeleteObjectCommand({ Bucket: this.bucket, Key: this.#keyPrefix + key }))
    } catch (err) {
      const classified = classifyS3Error(err, 'delete', key, this.url)
      if (classified.code !== 'ERR_NOT_FOUND') throw classified
    }
  }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#reader?.close()
    if (this.#sdk !== undefined) (await this.#sdk).client.destroy()
  }

  #check (op: S3StoreOp, key: string): void {
    this.#assertOpen(op)
    assertValidKey(key, this.url)
  }

  #assertOpen (op: string): void {
    if (this.#closed) throw new UsageError(`cannot ${op}: store ${this.url} is closed`)
  }
}

/** The whole response body as one Buffer (one copy). Async; rejects on a stream error. */
async function readBody (body: unknown): Promise<Buffer> {
  if (body === undefined || body === null) return Buffer.alloc(0)
  const chunks: Buffer[] = []
  let total = 0
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    chunks.push(buf)
    total += buf.length
  }
  if (chunks.length === 1) return chunks[0] as Buffer
  return Buffer.concat(chunks, total)
}
