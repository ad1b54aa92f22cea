/**
 * A unix socket that answers at once and loads the code that serves it on
 * its first connection. containerd dials the snapshotter only when it
 * needs it, and gRPC (grpc-js, protobufjs and the parse of containerd's
 * protos) costs the daemon 100–300 ms of CPU and several MB of heap: a
 * daemon that no containerd talks to should not pay that at start.
 *
 * Connections are accepted paused (`pauseOnConnect`): nothing is read from
 * them until the loaded handler takes them over, so the handler (grpc-js's
 * http2 server) sees every byte the client sent. Connections that arrive
 * while the handler loads wait for it. A handler that fails to load is
 * logged once and every connection is closed; the next connection tries
 * again.
 *
 * May import: node built-ins.
 */
import { chmodSync, rmSync } from 'node:fs'
import { createServer, type Server, type Socket } from 'node:net'
import type { LogLine } from '../log-line.js'

/** What serves the connections once loaded. */
export interface SocketHandler {
  /** Serve one accepted (paused) connection. Sync. */
  take: (socket: Socket) => void
  /** Stop serving (cut open connections). Async; idempotent. */
  close: () => Promise<void>
}

export class OnDemandSocket {
  readonly #path: string
  readonly #load: () => Promise<SocketHandler>
  readonly #log: LogLine
  #server: Server | undefined
  #handler: Promise<SocketHandler> | undefined
  #closed = false

  /** `load` builds the handler; it is called on the first connection (again after a failure). */
  constructor (path: string, load: () => Promise<SocketHandler>, log: LogLine) {
    this.#path = path
    this.#load = load
    this.#log = log
  }

  /** True once a connection made the handler load. */
  get loaded (): boolean { return this.#handler !== undefined }

  /** Bind the socket, mode 0600 (a stale socket file is replaced). Async; throws on a bind error. */
  async listen (): Promise<void> {
    rmSync(this.#path, { force: true })
    const server = createServer({ pauseOnConnect: true }, socket => { this.#accept(socket) })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(this.#path, () => { server.off('error', reject); resolve() })
    })
    server.on('error', err => { this.#log(`${this.#path}: ${err.message}`, 'warn') })
    chmodSync(this.#path, 0o600)
    this.#server = server
  }

  /**
   * Load the handler now, if no connection has yet: for a caller about to
   * make the client connect (the daemon's own containerd pull), so the
   * client's first handshake is not answered only after the load. Async;
   * never rejects (a failed load is logged; the next connection tries again).
   */
  async preload (): Promise<void> {
    if (this.#closed) return
    const handler = this.#loadHandler()
    await handler.then(() => {}, () => {})
  }

  #loadHandler (): Promise<SocketHandler> {
    if (this.#handler !== undefined) return this.#handler
    const handler = this.#load()
    this.#handler = handler
    handler.catch((err: unknown) => {
      // One log line per failed load; the next connection loads again.
      if (this.#handler === handler) {
        this.#handler = undefined
        this.#log(`${this.#path}: cannot load its server: ${(err as Error)?.message ?? String(err)}`, 'warn')
      }
    })
    return handler
  }

  #accept (socket: Socket): void {
    if (this.#closed) { socket.destroy(); return }
    const handler = this.#loadHandler()
    handler.then(h => {
      if (this.#closed) socket.destroy()
      else h.take(socket)
    }, () => { socket.destroy() })
  }

  /** Stop accepting, close the loaded handler and remove the socket file. Async; idempotent. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    const server = this.#server
    // The server's close completes once its connections end: the handler's close cuts those it serves.
    const stopped = server === undefined ? undefined : new Promise<void>(resolve => server.close(() => { resolve() }))
    const handler = await this.#handler?.catch(() => undefined)
    await handler?.close()
    await stopped
    if (server !== undefined) rmSync(this.#path, { force: true })
  }
}
