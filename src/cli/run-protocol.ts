/**
 * The run socket's wire format (`<home>/run.sock`, served by layerd, spoken
 * by the C front of layerctl, native/layerctl.c): `layerctl run` without a
 * Node process per call. Pure: bytes in, bytes out.
 *
 * Request (client → layerd), once per connection:
 *   u32 LE length, then that many bytes: NUL-terminated strings
 *   RUN_PROTOCOL_MAGIC, the client's cwd, argc in decimal, argc arguments
 *   (layerctl's argv without the program), then any number of `NAME=VALUE`
 *   environment entries (the client sends its LAYERD_* variables and
 *   run-socket-commands.ts's RUN_SOCKET_ENV).
 * Answer (layerd → client): frames of one type byte, a u32 LE length and
 * the payload:
 *   'o' stdout bytes, 'e' stderr bytes,
 *   'x' the exit code (i32 LE), last;
 *   'f' "run this with the Node CLI" (only before any output): the request
 *       is one this daemon does not serve (another command or home, a request
 *       it cannot parse), and the client execs dist/cli/layerctl.js itself,
 *       so the answer is exactly the Node CLI's.
 * The C side mirrors these constants (native/layerctl.c); change both.
 *
 * May import: nothing from the project.
 */
import { join } from 'node:path'

export const RUN_SOCKET_NAME = 'run.sock'
export const RUN_PROTOCOL_MAGIC = 'layerd-run 1'
/** A request larger than this is refused (fallback frame): argv and env, not data. */
export const MAX_RUN_REQUEST_BYTES = 1024 * 1024

export const FRAME = { STDOUT: 0x6f, STDERR: 0x65, EXIT: 0x78, FALLBACK: 0x66 } as const
const FRAME_HEADER_BYTES = 5

export const runSocketPath = (home: string): string => join(home, RUN_SOCKET_NAME)

export interface RunRequest {
  cwd: string
  argv: string[]
  env: Record<string, string>
}

/** Encode a request (length prefix included). Sync. Throws TypeError on a string holding NUL (it cannot be sent). */
export function encodeRunRequest (r: RunRequest): Buffer {
  const fields = [RUN_PROTOCOL_MAGIC, r.cwd, String(r.argv.length), ...r.argv, ...Object.entries(r.env).map(([k, v]) => `${k}=${v}`)]
  for (const f of fields) if (f.includes('\0')) throw new TypeError(`run request field ${JSON.stringify(f)} holds a NUL byte`)
  const body = Buffer.from(fields.map(f => `${f}\0`).join(''), 'utf8')
  const head = Buffer.alloc(4)
  head.writeUInt32LE(body.length)
  return Buffer.concat([head, body])
}

/**
 * Decode a request body (without its length prefix). Sync. Returns a
 * string saying what is wrong instead of throwing: a bad request gets the
 * fallback frame, never an exception in the daemon.
 */
export function decodeRunRequest (body: Buffer): RunRequest | string {
  if (body.length === 0 || body[body.length - 1] !== 0) return 'the request does not end with NUL'
  const fields = body.subarray(0, body.length - 1).toString('utf8').split('\0')
  if (fields[0] !== RUN_PROTOCOL_MAGIC) return `the request does not start with ${JSON.stringify(RUN_PROTOCOL_MAGIC)}`
  const cwd = fields[1]
  const argc = Number(fields[2])
  if (cwd === undefined || !cwd.startsWith('/')) return 'the request\'s cwd is not an absolute path'
  if (!Number.isSafeInteger(argc) || argc < 0 || 3 + argc > fields.length) return `the request's argc ${JSON.stringify(fields[2])} does not match its fields`
  const env: Record<string, string> = {}
  for (const entry of fields.slice(3 + argc)) {
    const eq = entry.indexOf('=')
    if (eq <= 0) return `the request's environment entry ${JSON.stringify(entry)} is not NAME=VALUE`
    env[entry.slice(0, eq)] = entry.slice(eq + 1)
  }
  return { cwd, argv: fields.slice(3, 3 + argc), env }
}

/** One answer frame. Sync. */
export function encodeFrame (type: number, payload: Uint8Array): Buffer {
  const head = Buffer.alloc(FRAME_HEADER_BYTES)
  head[0] = type
  head.writeUInt32LE(payload.length, 1)
  return Buffer.concat([head, payload])
}

/** The exit frame of `code`. Sync. */
export function exitFrame (code: number): Buffer {
  const p = Buffer.alloc(4)
  p.writeInt32LE(code)
  return encodeFrame(FRAME.EXIT, p)
}

export interface RunFrame { type: number, payload: Buffer }

/**
 * Split `buf` into whole frames; `rest` is an incomplete tail to prepend to
 * the next bytes. Sync. Used by tests and any Node client.
 */
export function decodeFrames (buf: Buffer): { frames: RunFrame[], rest: Buffer } {
  const frames: RunFrame[] = []
  let at = 0
  while (buf.length - at >= FRAME_HEADER_BYTES) {
    const len = buf.readUInt32LE(at + 1)
    if (buf.length - at - FRAME_HEADER_BYTES < len) break
    frames.push({ type: buf[at]!, payload: buf.subarray(at + FRAME_HEADER_BYTES, at + FRAME_HEADER_BYTES + len) })
    at += FRAME_HEADER_BYTES + len
  }
  return { frames, rest: buf.subarray(at) }
}
