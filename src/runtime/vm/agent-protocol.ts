/**
 * The wire format between the host and layerd-agent (guest/layerd-agent.c),
 * over one ordered byte stream (a virtio-serial port under QEMU, vsock under
 * Firecracker). Every frame is `[type u8][length u32 LE][payload]`.
 *
 * host → guest: EXEC (NUL-terminated fields: argc, argv…, envc, env…, cwd,
 * user, host time in ms), STDIN bytes, STDIN_EOF, KILL, SHUTDOWN.
 * guest → host: READY (`key=value` lines), STDOUT bytes, STDERR bytes,
 * EXIT (`code\0signal\0`), or ERROR (`kind\nmessage`) instead of EXIT when
 * the command could not be set up (kind `user`: unknown user or group;
 * `cwd`: working directory not enterable; `root`: no image root).
 *
 * A command's output and its EXIT frame share the stream, so EXIT arrives
 * after every output byte. The guest is untrusted: the decoder bounds frame
 * sizes and rejects what it does not know.
 *
 * Pure: no fs, network or native code.
 */
import { BadInputError, CorruptObjectError } from '../../errors.js'

export const FRAME_HEADER_BYTES = 5
export const Frame = {
  EXEC: 1,
  STDIN: 2,
  STDIN_EOF: 3,
  KILL: 4,
  SHUTDOWN: 5,
  READY: 16,
  STDOUT: 17,
  STDERR: 18,
  EXIT: 19,
  ERROR: 21
} as const
/** Largest frame the host accepts from the guest (the agent sends at most 64 KiB of output per frame). */
export const MAX_GUEST_FRAME_BYTES = 1024 * 1024
/** Largest frame the agent accepts (its MAX_FRAME_BYTES); stdin is split to fit. */
export const MAX_HOST_FRAME_BYTES = 4 * 1024 * 1024
export const STDIN_FRAME_BYTES = 256 * 1024
/** The agent's field table holds 8,192 argv + env strings. */
const MAX_EXEC_FIELDS = 8192

export interface DecodedFrame { type: number, payload: Buffer }

export function encodeFrame (type: number, payload: Uint8Array = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(FRAME_HEADER_BYTES)
  head[0] = type
  head.writeUInt32LE(payload.length, 1)
  return Buffer.concat([head, payload])
}

export interface ExecRequest {
  argv: string[]
  env: string[]
  cwd: string
  user: string
  hostTimeMs: number
}

/** EXEC payload. Sync. Throws BadInputError for a NUL inside a field, no argv, or too many fields. */
export function encodeExecRequest (r: ExecRequest): Buffer {
  if (r.argv.length === 0) throw new BadInputError('exec needs at least one argv element')
  if (r.argv.length + r.env.length > MAX_EXEC_FIELDS) throw new BadInputError(`exec has ${r.argv.length + r.env.length} argv and env strings; the VM agent takes at most ${MAX_EXEC_FIELDS}`)
  const fields = [String(r.argv.length), ...r.argv, String(r.env.length), ...r.env, r.cwd, r.user, String(Math.round(r.hostTimeMs))]
  for (const f of fields) if (f.includes('\0')) throw new BadInputError(`exec field ${JSON.stringify(f.slice(0, 40))} contains a NUL byte`)
  const payload = Buffer.from(fields.map(f => `${f}\0`).join(''))
  if (payload.length > MAX_HOST_FRAME_BYTES) throw new BadInputError(`exec request of ${payload.length} bytes exceeds the VM agent's ${MAX_HOST_FRAME_BYTES}`)
  return payload
}

export interface ExitStatus { exitCode: number, signal?: number }

/** EXIT payload. Throws CorruptObjectError for anything but two decimal fields. */
export function decodeExit (payload: Buffer): ExitStatus {
  const [code, signal] = payload.toString('latin1').split('\0')
  if (code === undefined || signal === undefined || !/^\d{1,3}$/.test(code) || !/^\d{1,3}$/.test(signal)) {
    throw new CorruptObjectError(`VM agent sent a malformed exit frame ${JSON.stringify(payload.toString('latin1').slice(0, 40))}`)
  }
  const s = Number(signal)
  return s === 0 ? { exitCode: Number(code) } : { exitCode: Number(code), signal: s }
}

export interface AgentError { kind: string, message: string }

/** ERROR payload: `kind\nmessage`. */
export function decodeAgentError (payload: Buffer): AgentError {
  const text = payload.toString('utf8')
  const nl = text.indexOf('\n')
  return nl < 0 ? { kind: 'unknown', message: text } : { kind: text.slice(0, nl), message: text.slice(nl + 1) }
}

/** READY payload: `key=value` lines. */
export function decodeReady (payload: Buffer): Record<string, string> {
  const out: Record<string, string> = {}
  for (const line of payload.toString('utf8').split('\n')) {
    const eq = line.indexOf('=')
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1)
  }
  return out
}

/** Splits a byte stream into frames. Push bytes in, take complete frames out. */
export class FrameDecoder {
  readonly #maxPayload: number
  #pending: Buffer[] = []
  #pendingBytes = 0

  constructor (maxPayloadBytes = MAX_GUEST_FRAME_BYTES) {
    this.#maxPayload = maxPayloadBytes
  }

  /** Append bytes; returns the frames now complete. Throws CorruptObjectError for an oversized frame. */
  push (bytes: Buffer): DecodedFrame[] {
    this.#pending.push(bytes)
    this.#pendingBytes += bytes.length
    let buf = this.#pending.length === 1 ? this.#pending[0]! : Buffer.concat(this.#pending)
    const frames: DecodedFrame[] = []
    let at = 0
    while (buf.length - at >= FRAME_HEADER_BYTES) {
      const length = buf.readUInt32LE(at + 1)
      if (length > this.#maxPayload) throw new CorruptObjectError(`VM agent sent a ${length}-byte frame (limit ${this.#maxPayload})`)
      if (buf.length - at < FRAME_HEADER_BYTES + length) break
      frames.push({ type: buf[at]!, payload: buf.subarray(at + FRAME_HEADER_BYTES, at + FRAME_HEADER_BYTES + length) })
      at += FRAME_HEADER_BYTES + length
    }
    buf = buf.subarray(at)
    this.#pending = buf.length > 0 ? [buf] : []
    this.#pendingBytes = buf.length
    return frames
  }

  get bufferedBytes (): number { return this.#pendingBytes }
}
