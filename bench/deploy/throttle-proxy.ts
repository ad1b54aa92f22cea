/**
 * A user-space network throttle: a TCP proxy on loopback between one
 * simulated node (dockerd, or layerd's S3 client) and the registry or store,
 * applying that node's link model (link-model.ts) to every byte. This
 * kernel has no netem/tbf qdiscs, so the link lives here.
 *
 * - Bandwidth: each direction is one FIFO queue shared by all connections
 *   of the proxy (one proxy = one node's link).
 * - Latency: every segment arrives one-way delay (RTT / 2) after it left
 *   the queue; a new connection's first bytes also wait one RTT (the TCP
 *   handshake the loopback connect skipped).
 * - Flow control: a connection keeps at most WINDOW_BYTES in flight per
 *   direction (scheduled, not yet delivered), like a TCP window; the source
 *   socket is paused beyond that, and while the destination is not draining.
 * - Counting: bytes in each direction, for "bytes transferred".
 *
 * Timers have 1 ms resolution and the event loop of a loaded machine adds
 * its own delay, so the effective RTT is at least the configured one
 * (throttle.test.ts measures it).
 *
 * Bench-only: may import node built-ins and link-model.ts.
 */
import { createServer, connect, type Server, type Socket } from 'node:net'
import { type LinkDirection, type LinkSpec, NodeLink } from './link-model.js'

/** Per-connection, per-direction bytes in flight before the source is paused. */
export const WINDOW_BYTES = 512 * 1024

export interface ThrottleProxyOptions {
  upstreamHost: string
  upstreamPort: number
  link: LinkSpec
  /** Label for messages. */
  name?: string
}

export interface ThrottleStats {
  /** Upstream → client (registry/store → node). */
  bytesDown: number
  /** Client → upstream. */
  bytesUp: number
  connections: number
}

export class ThrottleProxy {
  readonly #server: Server
  readonly #link: NodeLink
  readonly #sockets = new Set<Socket>()
  readonly #stats: ThrottleStats = { bytesDown: 0, bytesUp: 0, connections: 0 }
  #closing: Promise<void> | undefined

  private constructor (server: Server, link: NodeLink) {
    this.#server = server
    this.#link = link
  }

  /** Listen on 127.0.0.1 (ephemeral port) and forward to the upstream. Async; rejects if it cannot listen. */
  static async start (opts: ThrottleProxyOptions): Promise<ThrottleProxy> {
    const link = new NodeLink(opts.link)
    const server = createServer({ allowHalfOpen: true })
    const proxy = new ThrottleProxy(server, link)
    server.on('connection', client => proxy.#accept(client, opts))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => { server.off('error', reject); resolve() })
    })
    return proxy
  }

  get port (): number {
    const a = this.#server.address()
    if (a === null || typeof a === 'string') throw new Error('throttle proxy is not listening')
    return a.port
  }

  /** `127.0.0.1:PORT`. */
  get hostPort (): string { return `127.0.0.1:${this.port}` }

  get link (): LinkSpec { return this.#link.spec }

  /** A snapshot of the counters. */
  stats (): ThrottleStats { return { ...this.#stats } }

  /** Stop listening and cut every connection. Idempotent. Async. */
  async close (): Promise<void> {
    this.#closing ??= new Promise<void>(resolve => {
      for (const s of this.#sockets) s.destroy()
      this.#server.close(() => resolve())
    })
    await this.#closing
  }

  #accept (client: Socket, opts: ThrottleProxyOptions): void {
    this.#stats.connections++
    const upstream = connect({ port: opts.upstreamPort, host: opts.upstreamHost, allowHalfOpen: true })
    for (const s of [client, upstream]) {
      this.#sockets.add(s)
      s.setNoDelay(true)
      s.on('close', () => this.#sockets.delete(s))
    }
    const kill = (): void => { client.destroy(); upstream.destroy() }
    client.on('error', kill)
    upstream.on('error', kill)
    // A normal close travels as 'end' through the pumps (after the queued
    // bytes); only an abort cuts the other side at once.
    client.on('close', hadError => { if (hadError) upstream.destroy() })
    upstream.on('close', hadError => { if (hadError) client.destroy() })
    // Loopback connects at once; a real client sends its first bytes after
    // the SYN/SYN-ACK round trip, so they arrive 1.5 RTT after the connect.
    const handshakeDoneAt = performance.now() + 1.5 * this.#link.spec.rttMs
    pump(client, upstream, this.#link.up, handshakeDoneAt, n => { this.#stats.bytesUp += n })
    pump(upstream, client, this.#link.down, 0, n => { this.#stats.bytesDown += n })
  }
}

interface Segment { data: Buffer, at: number }

/** Move bytes from `src` to `dst` through `dir`, delivering each segment at its arrival time. */
function pump (src: Socket, dst: Socket, dir: LinkDirection, notBeforeMs: number, count: (n: number) => void): void {
  const queue: Segment[] = []
  let queued = 0
  let timer: NodeJS.Timeout | undefined
  let ended = false
  let dstBlocked = false

  const maybeResume = (): void => {
    if (queued < WINDOW_BYTES && !dstBlocked && src.isPaused()) src.resume()
  }
  const arm = (): void => {
    if (timer !== undefined || queue.length === 0) return
    timer = setTimeout(flush, Math.max(0, queue[0]!.at - performance.now()))
  }
  const flush = (): void => {
    timer = undefined
    if (dst.destroyed || !dst.writable) return
    const now = performance.now()
    while (queue.length > 0 && queue[0]!.at <= now) {
      const seg = queue.shift()!
      queued -= seg.data.length
      if (!dst.write(seg.data) && !dstBlocked) {
        dstBlocked = true
        dst.once('drain', () => { dstBlocked = false; maybeResume() })
      }
    }
    if (queue.length === 0 && ended) dst.end()
    maybeResume()
    arm()
  }

  src.on('data', (data: Buffer) => {
    count(data.length)
    const at = Math.max(dir.schedule(performance.now(), data.length), notBeforeMs)
    queue.push({ data, at })
    queued += data.length
    if (queued >= WINDOW_BYTES) src.pause()
    arm()
  })
  src.on('end', () => {
    ended = true
    if (queue.length === 0 && !dst.destroyed) dst.end()
  })
}
