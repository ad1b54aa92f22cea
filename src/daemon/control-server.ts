/**
 * The daemon's side of the control socket: one handler per method, errors
 * turned into { code, message } once, here.
 *
 * May import: src/errors.ts, this folder.
 */
import { chmod, rm } from 'node:fs/promises'
import { createServer, type Server, type Socket } from 'node:net'
import { LayerdError, UsageError } from '../errors.js'
import { MAX_REQUEST_BYTES, type ControlRequest, type ControlResponse } from './control-protocol.js'

/** sun_path is 108 bytes on Linux, NUL included. */
export const MAX_SOCKET_PATH_BYTES = 107

export type ControlHandler = (params: any) => Promise<unknown>

export class ControlServer {
  readonly #handlers: Map<string, ControlHandler>
  readonly #sockets = new Set<Socket>()
  #server: Server | undefined
  readonly #log: (line: string) => void

  constructor (handlers: Record<string, ControlHandler>, log: (line: string) => void) {
    this.#handlers = new Map(Object.entries(handlers))
    this.#log = log
  }

  /** Listen on `path` (replacing a stale socket file), mode 0600. Async. */
  async listen (path: string): Promise<void> {
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) {
      throw new UsageError(`cannot listen on ${path}: a Unix socket path is at most ${MAX_SOCKET_PATH_BYTES} bytes; use a shorter --home`)
    }
    await rm(path, { force: true })
    const server = createServer(socket => this.#serve(socket))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      const previous = process.umask(0o177)
      try { server.listen(path, () => { server.off('error', reject); resolve() }) } finally { process.umask(previous) }
    })
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
    let buffered = ''
    socket.setEncoding('utf8')
    socket.on('data', (data: string) => {
      buffered += data
      if (buffered.length > MAX_REQUEST_BYTES) { socket.destroy(); return }
      let nl: number
      while ((nl = buffered.indexOf('\n')) !== -1) {
        const line = buffered.slice(0, nl)
        buffered = buffered.slice(nl + 1)
        void this.#answer(line).then(r => { if (!socket.destroyed) socket.write(JSON.stringify(r) + '\n') })
      }
    })
  }

  async #answer (line: string): Promise<ControlResponse> {
    let req: ControlRequest
    try { req = JSON.parse(line) } catch { return { id: -1, error: { code: UsageError.code, message: 'request is not valid JSON' } } }
    const handler = this.#handlers.get(req.method)
    if (handler === undefined) return { id: req.id, error: { code: UsageError.code, message: `unknown method ${JSON.stringify(req.method)}` } }
    try {
      return { id: req.id, result: (await handler(req.params ?? {})) ?? null }
    } catch (err) {
      if (!(err instanceof LayerdError)) this.#log(`control ${req.method}: ${(err as Error).stack ?? String(err)}`)
      const code = err instanceof LayerdError ? err.code : 'ERR_INTERNAL'
      return { id: req.id, error: { code, message: (err as Error).message ?? String(err) } }
    }
  }
}
