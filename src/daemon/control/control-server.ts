/**
 * The daemon's side of the control socket: one typed handler per method of
 * the map (control-protocol.ts), every request line checked before its
 * handler runs (control-request.ts), errors turned into { code, message }
 * once, here.
 *
 * Nothing a client sends can end the daemon: every line gets exactly one
 * answer, and an answer never throws.
 * - a line that is not UTF-8, not JSON, not an object, or names an unknown
 *   method or a bad param: ERR_BAD_REQUEST naming the method and the field;
 * - a line longer than MAX_REQUEST_BYTES: ERR_BAD_REQUEST, the rest of it
 *   skipped up to its newline (the connection stays usable);
 * - a handler that fails: its LayerdError code, or ERR_INTERNAL with the
 *   stack in the daemon log for anything else (a bug);
 * - a result that cannot be serialized: ERR_INTERNAL, logged.
 * A connection beyond MAX_CONTROL_CONNECTIONS is closed at once; accept
 * errors (EMFILE) are logged and the server keeps listening.
 *
 * May import: src/errors.ts, this folder.
 */
import { chmod, rm } from 'node:fs/promises'
import { createServer, type Server, type Socket } from 'node:net'
import { InternalError, LayerdError, UsageError } from '../../errors.js'
import {
  BadRequestError, MAX_REQUEST_BYTES, type ControlError, type ControlHandlers, type ControlRequest, type ControlResponse
} from '../client/control-protocol.js'
import { checkRequestLine } from './control-request.js'
import type { LogLine } from '../../log-line.js'

/** sun_path is 108 bytes on Linux, NUL included. */
export const MAX_SOCKET_PATH_BYTES = 107
/** Connections served at once; more are closed on accept (each costs a file descriptor). */
export const MAX_CONTROL_CONNECTIONS = 512

const NEWLINE = 0x0a

export class ControlServer {
  readonly #handlers: ControlHandlers
  readonly #sockets = new Set<Socket>()
  #server: Server | undefined
  readonly #log: LogLine
  readonly #utf8 = new TextDecoder('utf-8', { fatal: true })

  constructor (handlers: ControlHandlers, log: LogLine) {
    this.#handlers = handlers
    this.#log = log
  }

  /**
   * Listen on `path` (replacing a socket file left there: the caller holds
   * the home's lock, so no live daemon owns it), mode 0600. Async.
   */
  async listen (path: string): Promise<void> {
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) {
      throw new UsageError(`cannot listen on ${path}: a Unix socket path is at most ${MAX_SOCKET_PATH_BYTES} bytes; use a shorter --home`)
    }
    await rm(path, { force: true })
    const server = createServer(socket => this.#serve(socket))
    server.maxConnections = MAX_CONTROL_CONNECTIONS
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      const previous = process.umask(0o177)
      try { server.listen(path, () => { server.off('error', reject); resolve() }) } finally { process.umask(previous) }
    })
    server.on('error', err => this.#log(`control socket ${path}: ${err.message}`, 'warn'))
    await chmod(path, 0o600)
    this.#server = server
  }

  /** Stop accepting and drop connections. Idempotent. */
  async close (): Promise<void> {
    const server = this.#server
    this.#server = undefined
    for (const s of this.#sockets) s.destroy()
    if (server !== undefined) await new Promise<void>(resolve => server.close(() => resolve()))
  }

  #serve (socket: Socket): void {
    this.#sockets.add(socket)
    socket.on('close', () => this.#sockets.delete(socket))
    socket.on('error', () => socket.destroy())
    const reply = (r: ControlResponse): void => { if (!socket.destroyed && socket.writable) socket.write(this.#serialize(r)) }
    let parts: Buffer[] = []
    let partBytes = 0
    /** The current line passed the limit: it was answered, the rest of it is dropped. */
    let skipping = false
    socket.on('data', (data: Buffer) => {
      let from = 0
      let nl: number
      while ((nl = data.indexOf(NEWLINE, from)) !== -1) {
        const piece = data.subarray(from, nl)
        from = nl + 1
        if (skipping) { skipping = false; continue }
        if (partBytes + piece.length > MAX_REQUEST_BYTES) { parts = []; partBytes = 0; reply(tooLong()); continue }
        const line = parts.length === 0 ? piece : Buffer.concat([...parts, piece])
        parts = []
        partBytes = 0
        void this.#answer(line).then(reply)
      }
      if (skipping || from === data.length) return
      const rest = data.subarray(from)
      if (partBytes + rest.length > MAX_REQUEST_BYTES) {
        parts = []
        partBytes = 0
        skipping = true
        reply(tooLong())
        return
      }
      parts.push(Buffer.from(rest)) // a copy: `data` may be a slice of a pooled buffer
      partBytes += rest.length
    })
  }

  /** The answer to one line. Async; never rejects. */
  async #answer (bytes: Buffer): Promise<ControlResponse> {
    let line: string
    try {
      line = this.#utf8.decode(bytes)
    } catch {
      return failure(null, new BadRequestError(`control request is not valid UTF-8 (${bytes.length} bytes)`))
    }
    const checked = checkRequestLine(line)
    if (!checked.ok) return failure(checked.id, checked.error)
    const req = checked.request
    try {
      return { id: req.id, result: (await this.#dispatch(req)) ?? null }
    } catch (err) {
      if (!(err instanceof LayerdError)) this.#log(`control ${req.method}: ${(err as Error)?.stack ?? String(err)}`, 'warn')
      return failure(req.id, err)
    }
  }

  /** Call the handler of a checked request (its params match the method's spec). */
  async #dispatch (req: ControlRequest): Promise<unknown> {
    const handler = this.#handlers[req.method] as (params: unknown) => Promise<unknown>
    return await handler(req.params)
  }

  #serialize (r: ControlResponse): string {
    try {
      return JSON.stringify(r) + '\n'
    } catch (err) {
      this.#log(`control response ${String(r.id)} cannot be serialized: ${(err as Error).stack ?? String(err)}`, 'warn')
      return JSON.stringify(failure(r.id, new InternalError(`the answer cannot be serialized: ${(err as Error).message}`))) + '\n'
    }
  }
}

function failure (id: number | null, err: unknown): ControlResponse {
  const error: ControlError = err instanceof LayerdError
    ? { code: err.code, message: err.message }
    : { code: 'ERR_INTERNAL', message: err instanceof Error ? err.message : String(err) }
  return { id, error }
}

function tooLong (): ControlResponse {
  return failure(null, new BadRequestError(`control request line is longer than ${MAX_REQUEST_BYTES} bytes: refused`))
}
