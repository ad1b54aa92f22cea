/**
 * Reading request bodies with a cap, and E2B-shaped answers. A body over its
 * cap is refused (413) as soon as the cap is passed, without reading the
 * rest; a slow client is the server's timeouts' job (./api-server.ts).
 *
 * May import: src/errors.ts, node built-ins.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { BadInputError, LimitExceededError } from '../errors.js'

/** JSON bodies (control plane, RPC requests): far more than any real request. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024

/** The whole body, at most `max` bytes. Async; rejects with LimitExceededError (tagged `status: 413`) past it. */
export async function readBody (req: IncomingMessage, max: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'])
  if (Number.isFinite(declared) && declared > max) throw tooLarge(max)
  const chunks: Buffer[] = []
  let total = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    total += chunk.length
    if (total > max) throw tooLarge(max)
    chunks.push(chunk)
  }
  return Buffer.concat(chunks, total)
}

function tooLarge (max: number): Error {
  return Object.assign(new LimitExceededError(`request body over ${max} bytes`), { status: 413 })
}

/** A JSON object body; `{}` when empty. Async; throws BadInputError for anything else. */
export async function readJsonObject (req: IncomingMessage): Promise<Record<string, unknown>> {
  const body = await readBody(req, MAX_JSON_BODY_BYTES)
  if (body.length === 0) return {}
  let v: unknown
  try { v = JSON.parse(body.toString('utf8')) } catch (err) { throw new BadInputError(`the body is not JSON: ${(err as Error).message}`) }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new BadInputError('the body must be a JSON object')
  return v as Record<string, unknown>
}

export function sendJson (res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/** E2B's error body: `{ code, message }` with the HTTP status as the code. */
export function sendE2bError (res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) { res.destroy(); return }
  sendJson(res, status, { code: status, message })
}

/** A string-to-string map from a request field (metadata, envVars); `{}` when absent. Sync; throws BadInputError. */
export function stringMap (v: unknown, what: string): Record<string, string> {
  if (v === undefined || v === null) return {}
  if (typeof v !== 'object' || Array.isArray(v)) throw new BadInputError(`${what} must be an object of strings`)
  const out: Record<string, string> = {}
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== 'string') throw new BadInputError(`${what}.${k} must be a string`)
    out[k] = val
  }
  return out
}
