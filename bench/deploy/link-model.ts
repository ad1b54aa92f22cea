/**
 * The network model of the deploy benchmark, as plain arithmetic: one
 * node's link to the registry or store, full duplex, each direction a FIFO
 * store-and-forward queue with a bandwidth and a one-way propagation delay
 * (RTT / 2). Every connection of the node shares its direction's queue, so
 * parallel pulls share the node's bandwidth as they would on a real NIC.
 *
 * Pure: no timers, no sockets (the proxy in throttle-proxy.ts drives it).
 *
 * Bench-only: may import nothing.
 */

/** A node's link. `bitsPerSecond` Infinity means no bandwidth limit. */
export interface LinkSpec {
  bitsPerSecond: number
  rttMs: number
}

/** Parse "1g", "500m", "10G", "800k", "2.5g" (bits per second, SI) or "inf". Throws Error naming the input. */
export function parseBandwidth (text: string): number {
  if (/^(inf|infinity|none|off)$/i.test(text)) return Infinity
  const m = /^(\d+(?:\.\d+)?)\s*([kmg]?)(?:bit)?(?:\/s)?$/i.exec(text.trim())
  if (m === null) throw new Error(`invalid bandwidth ${JSON.stringify(text)}: use e.g. 1g, 500m, 10g (bit/s) or inf`)
  const unit = { '': 1, k: 1e3, m: 1e6, g: 1e9 }[m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g']
  const bits = Number(m[1]) * unit
  if (!(bits > 0)) throw new Error(`invalid bandwidth ${JSON.stringify(text)}: must be positive`)
  return bits
}

/** "1 Gbit/s, RTT 1 ms". */
export function describeLink (link: LinkSpec): string {
  const bw = !Number.isFinite(link.bitsPerSecond)
    ? 'unlimited bandwidth'
    : link.bitsPerSecond >= 1e9 ? `${+(link.bitsPerSecond / 1e9).toFixed(3)} Gbit/s` : `${+(link.bitsPerSecond / 1e6).toFixed(3)} Mbit/s`
  return `${bw}, RTT ${link.rttMs} ms`
}

/** One direction of a link: a FIFO queue serialising bytes at the bandwidth, then the one-way delay. */
export class LinkDirection {
  readonly #bytesPerMs: number
  readonly #delayMs: number
  #freeAtMs = -Infinity

  constructor (link: LinkSpec) {
    if (!(link.bitsPerSecond > 0)) throw new Error(`link bandwidth must be positive, got ${link.bitsPerSecond}`)
    if (!(link.rttMs >= 0)) throw new Error(`link RTT must be >= 0 ms, got ${link.rttMs}`)
    this.#bytesPerMs = link.bitsPerSecond / 8 / 1000
    this.#delayMs = link.rttMs / 2
  }

  /** The one-way delay in ms. */
  get delayMs (): number { return this.#delayMs }

  /**
   * `bytes` are handed to the link at `nowMs`; returns when their last byte
   * arrives at the far end (ms, same clock). Calls must come in
   * non-decreasing `nowMs` order; arrival times are then non-decreasing too.
   */
  schedule (nowMs: number, bytes: number): number {
    const start = Math.max(nowMs, this.#freeAtMs)
    this.#freeAtMs = start + bytes / this.#bytesPerMs
    return this.#freeAtMs + this.#delayMs
  }
}

/** Both directions of one node's link. */
export class NodeLink {
  readonly spec: LinkSpec
  /** Registry/store → node. */
  readonly down: LinkDirection
  /** Node → registry/store. */
  readonly up: LinkDirection

  constructor (spec: LinkSpec) {
    this.spec = spec
    this.down = new LinkDirection(spec)
    this.up = new LinkDirection(spec)
  }
}
