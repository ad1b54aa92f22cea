/**
 * The Connect protocol over HTTP/1.1 with JSON (connectrpc.com/docs/protocol),
 * the part envd's clients use:
 * - unary: `POST /<package>.<Service>/<Method>`, `Content-Type:
 *   application/json`, the request message as the body; the answer is the
 *   response message, or an error `{ code, message }` with the code's HTTP status;
 * - server streaming: `Content-Type: application/connect+json`; the request
 *   and every response message are enveloped (1 flag byte, a 4-byte
 *   big-endian length, the JSON); the stream ends with an envelope flagged
 *   0x02 holding `{}` or `{ error }`. Errors after the headers can only go there.
 * Compression (flag 0x01) is refused: the SDK does not compress requests.
 *
 * May import: ./api-errors.ts, node built-ins.
 */
import type { ServerResponse } from 'node:http'
import { BadInputError } from '../errors.js'
import { CONNECT_STATUS, type ApiFailure } from './api-errors.js'

const FLAG_COMPRESSED = 0x01
const FLAG_END_STREAM = 0x02
const ENVELOPE_HEADER_BYTES = 5

export type ConnectKind = 'unary' | 'stream'

/** Which kind of call a request's Content-Type announces, or undefined for one Connect does not define for JSON. */
export function connectKind (contentType: string | undefined): ConnectKind | undefined {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase()
  if (type === 'application/json') return 'unary'
  if (type === 'application/connect+json') return 'stream'
  return undefined
}

/** The request message of a call: the body itself (unary) or its one envelope (stream). Sync; throws BadInputError. */
export function requestMessage (kind: ConnectKind, body: Buffer): unknown {
  let json: Buffer = body
  if (kind === 'stream') {
    if (body.length < ENVELOPE_HEADER_BYTES) throw new BadInputError('a streaming call needs an enveloped request message')
    const flags = body[0]!
    const length = body.readUInt32BE(1)
    if ((flags & FLAG_COMPRESSED) !== 0) throw new BadInputError('compressed messages are not supported')
    if (length !== body.length - ENVELOPE_HEADER_BYTES) throw new BadInputError(`the request envelope says ${length} bytes, the body has ${body.length - ENVELOPE_HEADER_BYTES}`)
    json = body.subarray(ENVELOPE_HEADER_BYTES)
  }
  if (json.length === 0) return {}
  let message: unknown
  try { message = JSON.parse(json.toString('utf8')) } catch (err) {
    throw new BadInputError(`the request message is not JSON: ${(err as Error).message}`)
  }
  if (message === null || typeof message !== 'object' || Array.isArray(message)) throw new BadInputError('the request message must be a JSON object')
  return message
}

/** Answer a unary call. */
export function sendUnary (res: ServerResponse, message: unknown): void {
  const body = JSON.stringify(message)
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

/** Answer a unary call with an error. */
export function sendUnaryError (res: ServerResponse, failure: ApiFailure): void {
  const body = JSON.stringify(failure)
  res.writeHead(CONNECT_STATUS[failure.code], { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

function envelope (flags: number, message: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(message), 'utf8')
  const head = Buffer.alloc(ENVELOPE_HEADER_BYTES)
  head[0] = flags
  head.writeUInt32BE(json.length, 1)
  return Buffer.concat([head, json])
}

/** A server stream's writer: messages, then one end (with or without an error). */
export class ConnectStream {
  #ended = false

  constructor (private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'application/connect+json' })
  }

  get ended (): boolean { return this.#ended || this.res.destroyed }

  /** Write one message; false once the stream is ended or the client gone. */
  send (message: unknown): boolean {
    if (this.ended) return false
    this.res.write(envelope(0, message))
    return true
  }

  /** End the stream, with `failure` when the call failed. Idempotent. */
  end (failure?: ApiFailure): void {
    if (this.ended) { this.#ended = true; return }
    this.#ended = true
    this.res.end(envelope(FLAG_END_STREAM, failure === undefined ? {} : { error: failure }))
  }
}
