/**
 * LazyUnixServer: a unix socket whose server is loaded on its first
 * connection (issue 14: the containerd snapshotter's gRPC server, grpc-js
 * and the protos, are ~15 MB of an idle daemon's RSS, and a node that runs
 * no containerd never needs them).
 *
 * Until then a plain `net` server listens on `path` (0600). The first
 * connection loads the backend, which binds a temporary path next to
 * `path`; that socket is renamed over `path` (atomic: a client connecting
 * meanwhile reaches one server or the other, never nothing), and the plain
 * server stops accepting. The connections it accepted while loading are
 * piped to the backend, byte for byte, until they close; every later one
 * goes to the backend directly. If loading fails, those connections are
 * closed, the failure is logged, and the next connection tries again.
 *
 * May import: node built-ins.
 */
import { chmodSync, renameSync, rmSync } from 'node:fs'
import { connect, createServer, type Server, type Socket } from 'node:net'

/** What serves the socket once loaded (SnapshotsGrpcServer). */
export interface UnixBackend {
  /** Listen on `bindPath`, then make the socket appear at `path` (renaming it there). */
  listen: (path: string, bindPath: string) => Promise<void>
  close: () => Promise<void>
}

export class LazyUnixServer {
  readonly #path: string
  readonly #load: () => Promise<UnixBackend>
  readonly #log: (line: string) => void
  readonly #plain: Server
  #plainOpen = false
  #backend: UnixBackend | undefined
  #loading: Promise<UnixBackend> | undefined
  readonly #sockets = new Set<Socket>()
  #closed = false

  constructor (path: string, load: () => Promise<UnixBackend>, log: (line: string) => void) {
    this.#path = path
    this.#load = load
    this.#log = log
    this.#plain = createServer({ pauseOnConnect: true }, socket => this.#accepted(socket))
  }

  /** True once the backend serves the socket itself. */
  get loaded (): boolean { return this.#backend !== undefined }

  /** Listen on the path (a stale socket file is replaced). Async. */
  async listen (): Promise<void> {
    // Bound under its own name and renamed into place: libuv unlinks the name a server was bound to when it closes,
    // and by then `path` is the backend's socket.
    const plainPath = `${this.#path}.${process.pid}.plain`
    rmSync(plainPath, { force: true })
    await new Promise<void>((resolve, reject) => {
      this.#plain.once('error', reject)
      this.#plain.listen(plainPath, () => { this.#plain.off('error', reject); resolve() })
    })
    this.#plainOpen = true
    chmodSync(plainPath, 0o600)
    renameSync(plainPath, this.#path)
  }

  #accepted (socket: Socket): void {
    this.#track(socket)
    this.#loading ??= this.#start()
    this.#loading.then(() => { this.#pipe(socket) }, () => { socket.destroy() })
  }

  async #start (): Promise<UnixBackend> {
    const bindPath = `${this.#path}.${process.pid}.loading`
    try {
      const backend = await this.#load()
      if (this.#closed) { await backend.close(); throw new Error('closed while loading') }
      await backend.listen(this.#path, bindPath)
      this.#backend = backend
      this.#closePlain()
      return backend
    } catch (err) {
      rmSync(bindPath, { force: true })
      if (!this.#closed) this.#log(`${this.#path}: cannot start its server: ${(err as Error).message}`)
      this.#loading = undefined
      throw err
    }
  }

  /** Forward `socket` to the backend now at the path. */
  #pipe (socket: Socket): void {
    if (socket.destroyed) return
    const upstream = connect(this.#path)
    this.#track(upstream)
    const end = (): void => { socket.destroy(); upstream.destroy() }
    socket.on('error', end).on('close', end)
    upstream.on('error', end).on('close', end)
    socket.pipe(upstream)
    upstream.pipe(socket)
    socket.resume()
  }

  #track (socket: Socket): void {
    this.#sockets.add(socket)
    socket.once('close', () => this.#sockets.delete(socket))
  }

  #closePlain (): void {
    if (!this.#plainOpen) return
    this.#plainOpen = false
    // Unlinks the name it was bound to, long renamed: the path (the backend's socket now) stays.
    this.#plain.close()
  }

  /** Stop serving: the plain server, piped connections, the backend (which removes the socket). Idempotent. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    const wasLoaded = this.#backend !== undefined
    this.#closePlain()
    for (const s of this.#sockets) s.destroy()
    await this.#loading?.catch(() => {})
    if (this.#backend !== undefined) await this.#backend.close()
    else if (!wasLoaded) rmSync(this.#path, { force: true })
  }
}

