/**
 * S3HttpReader: S3 GETs (whole object or a byte range) over node:http(s)
 * with a keep-alive agent, signed with SigV4 (sigv4.ts). S3ObjectStore reads through it whenever its credentials
 * are static (options or the AWS_* variables), so that the daemon's read
 * path never loads @aws-sdk/client-s3 (~0.2 s of CPU at the first read) and
 * a GET skips the SDK's middleware stack (measured through the cold-start
 * link, 256 KiB ranges: 8.4 ms median with the SDK, 6.4 ms with this).
 *
 * One attempt per call. Failures are thrown as the raw shapes
 * classifyS3Error() (s3-errors.ts) already knows: an S3 error body becomes
 * `{ name: Code, Code, message, $metadata: { httpStatusCode } }`; socket
 * errors keep their Node `code`; a stalled connect, header wait or body is a
 * `TimeoutError`. The caller classifies; nothing is classified here.
 *
 * May import: node built-ins, ./sigv4.ts.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import { encodeS3Path, SigV4Signer, type SigV4Credentials } from './sigv4.js'

export interface S3HttpReaderOptions {
  /** `http(s)://host[:port]`: the bucket is addressed path-style under it. */
  endpoint: string
  bucket: string
  region: string
  credentials: SigV4Credentials
  connectTimeoutMs: number
  requestTimeoutMs: number
  idleTimeoutMs: number
  maxSockets: number
}

/** The error shape of a failed S3 request (what the SDK's service errors look like to classifyS3Error). */
export interface S3HttpError extends Error { Code?: string, $metadata: { httpStatusCode?: number } }

/** Most bytes of an error body read for its Code and Message. */
const ERROR_BODY_LIMIT_BYTES = 16 * 1024

export class S3HttpReader {
  readonly #url: URL
  readonly #bucket: string
  readonly #signer: SigV4Signer
  readonly #options: S3HttpReaderOptions
  readonly #agent: HttpAgent
  readonly #request: typeof httpRequest

  /** Sync, no I/O. Throws TypeError for an endpoint that is not a URL. */
  constructor (options: S3HttpReaderOptions) {
    this.#options = options
    this.#url = new URL(options.endpoint)
    this.#bucket = options.bucket
    this.#signer = new SigV4Signer(options.credentials, options.region)
    const https = this.#url.protocol === 'https:'
    const agentOptions = { keepAlive: true, maxSockets: options.maxSockets }
    this.#agent = https ? new HttpsAgent(agentOptions) : new HttpAgent(agentOptions)
    this.#request = https ? httpsRequest : httpRequest
  }

  /**
   * The object `objectKey` (the full key in the bucket), or `length` bytes of
   * it from `offset` when a range is given. Async. Resolves with the body as
   * one Buffer whatever its length (the caller checks it); rejects with an
   * S3HttpError for any status but 200/206, a Node socket error, or a
   * TimeoutError.
   */
  async get (objectKey: string, range?: { offset: number, length: number }): Promise<Buffer> {
    const basePath = this.#url.pathname.replace(/\/+$/, '')
    const path = `${basePath}${encodeS3Path(`/${this.#bucket}/${objectKey}`)}`
    const headers: Record<string, string> = { host: this.#url.host }
    if (range !== undefined) headers.range = `bytes=${range.offset}-${range.offset + range.length - 1}`
    const res = await this.#send(path, this.#signer.sign({ method: 'GET', path, headers }))
    const status = res.statusCode ?? 0
    if (status !== 200 && status !== 206) throw errorFromResponse(status, await readBody(res, ERROR_BODY_LIMIT_BYTES, this.#options.idleTimeoutMs))
    return await readBody(res, Infinity, this.#options.idleTimeoutMs)
  }

  /**
   * Open a keep-alive connection now (a signed HEAD of the bucket), so that
   * the first GET finds the TCP (and TLS) handshake done. Async; never
   * rejects: whatever the answer (even 403 without s3:ListBucket), the
   * connection stays in the pool; a failure is left to the first real request.
   */
  async preconnect (): Promise<void> {
    const path = `${this.#url.pathname.replace(/\/+$/, '')}${encodeS3Path(`/${this.#bucket}`)}`
    try {
      const res = await this.#send(path, this.#signer.sign({ method: 'HEAD', path, headers: { host: this.#url.host } }), 'HEAD')
      // The socket goes back to the pool once the (empty) body has ended.
      await new Promise<void>(resolve => { res.once('end', resolve); res.once('error', () => resolve()); res.resume() })
      await new Promise(resolve => setImmediate(resolve))
    } catch {}
  }

  /** Close idle keep-alive sockets. Sync; idempotent. */
  close (): void {
    this.#agent.destroy()
  }

  /** The response headers of one GET, within the connect and request timeouts. */
  async #send (path: string, headers: Record<string, string>, method: 'GET' | 'HEAD' = 'GET'): Promise<IncomingMessage> {
    return await new Promise<IncomingMessage>((resolve, reject) => {
      const req = this.#request({
        protocol: this.#url.protocol, hostname: this.#url.hostname, port: this.#url.port, method, path, headers, agent: this.#agent
      })
      const fail = (err: Error): void => { clearTimeout(answer); req.destroy(err); reject(err) }
      const answer = setTimeout(() => fail(timeoutError(`timed out waiting ${this.#options.requestTimeoutMs} ms for a response`)), this.#options.requestTimeoutMs)
      req.on('socket', socket => {
        if (!socket.connecting) return
        const connect = setTimeout(() => fail(timeoutError(`timed out connecting (${this.#options.connectTimeoutMs} ms)`)), this.#options.connectTimeoutMs)
        socket.once('connect', () => clearTimeout(connect))
        socket.once('close', () => clearTimeout(connect))
      })
      req.on('response', res => { clearTimeout(answer); resolve(res) })
      req.on('error', err => { clearTimeout(answer); reject(err) })
      req.end()
    })
  }
}

function timeoutError (message: string): Error {
  const err = new Error(message)
  err.name = 'TimeoutError'
  return err
}

/** The S3 error of a non-2xx answer: its XML `Code` and `Message` when there is a body. */
function errorFromResponse (status: number, body: Buffer): S3HttpError {
  const xml = body.toString('utf8')
  const code = /<Code>([^<]*)<\/Code>/.exec(xml)?.[1]
  const message = /<Message>([^<]*)<\/Message>/.exec(xml)?.[1] ?? `HTTP ${status}`
  const err = new Error(message) as S3HttpError
  if (code !== undefined) { err.name = code; err.Code = code } else err.name = `Http${status}`
  err.$metadata = { httpStatusCode: status }
  return err
}

/** The body, one Buffer, at most `limit` bytes kept; fails when the socket is silent for `idleMs` or closes early. */
async function readBody (res: IncomingMessage, limit: number, idleMs: number): Promise<Buffer> {
  return await new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = []
    let total = 0
    let idle = setTimeout(stalled, idleMs)
    function stalled (): void { res.destroy(timeoutError(`timed out: the response body stalled for ${idleMs} ms`)) }
    res.on('data', (chunk: Buffer) => {
      clearTimeout(idle)
      idle = setTimeout(stalled, idleMs)
      if (total < limit) { chunks.push(chunk); total += chunk.length }
    })
    res.on('end', () => { clearTimeout(idle); resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total)) })
    res.on('error', err => { clearTimeout(idle); reject(err) })
    res.on('aborted', () => { clearTimeout(idle); const e = new Error('the response was cut short') as Error & { code: string }; e.code = 'ECONNRESET'; reject(e) })
  })
}
