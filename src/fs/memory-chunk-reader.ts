/**
 * MemoryChunkReader: a ChunkReader over chunks held in memory, for tests and
 * benchmarks of the filesystem without a store. It keeps the contract of
 * the real cache + fetcher: a cache that answers synchronously, a "store"
 * behind it that read() fetches from, sha256 verified before a chunk enters
 * the cache (CorruptObjectError otherwise, never served), concurrent
 * fetches of one chunk collapsed, fetched bytes counted.
 *
 * `beforeFetch` is the seam for faults: a delay, a dead store.
 *
 * May import: src/errors.ts, src/format/, ./file-reader.ts (types).
 */
import { CorruptObjectError, NotFoundError } from '../errors.js'
import { sha256Hex } from '../format/digest.js'
import type { ChunkRef } from '../format/toc.js'
import type { ChunkReader } from './file-reader.js'

export interface MemoryChunkReaderOptions {
  /** Chunk bytes by sha256 hex: the "store". */
  store: ReadonlyMap<string, Uint8Array>
  /** Start with every chunk cached (a warm cache). */
  warm?: boolean
  /** Runs before each fetch (demand or prefetch) with the refs being fetched; may delay or throw. */
  beforeFetch?: (refs: readonly ChunkRef[], priority: 'demand' | 'prefetch') => Promise<void> | void
  storeName?: string
}

export class MemoryChunkReader implements ChunkReader {
  readonly storeName: string
  readonly cache = new Map<string, Uint8Array>()
  /** Fetches started, by priority, and refs fetched. */
  readonly fetches = { demand: 0, prefetch: 0, chunks: 0 }
  readonly #store: ReadonlyMap<string, Uint8Array>
  readonly #beforeFetch: MemoryChunkReaderOptions['beforeFetch']
  readonly #inflight = new Map<string, Promise<Uint8Array>>()
  #fetchedBytes = 0

  constructor (options: MemoryChunkReaderOptions) {
    this.#store = options.store
    this.#beforeFetch = options.beforeFetch
    this.storeName = options.storeName ?? 'memory://chunks'
    if (options.warm === true) for (const [digest, data] of options.store) this.cache.set(digest, data)
  }

  getCached (digest: string): Uint8Array | undefined {
    return this.cache.get(digest)
  }

  async read (refs: readonly ChunkRef[]): Promise<Uint8Array[]> {
    return await Promise.all(refs.map(async ref => await this.#fetch(ref, 'demand')))
  }

  prefetch (refs: readonly ChunkRef[]): void {
    for (const ref of refs) {
      if (!this.cache.has(ref.digest)) this.#fetch(ref, 'prefetch').catch(() => {})
    }
  }

  fetchedBytes (): number {
    return this.#fetchedBytes
  }

  async #fetch (ref: ChunkRef, priority: 'demand' | 'prefetch'): Promise<Uint8Array> {
    const cached = this.cache.get(ref.digest)
    if (cached !== undefined) return cached
    let flight = this.#inflight.get(ref.digest)
    if (flight === undefined) {
      flight = this.#fetchOnce(ref, priority).finally(() => this.#inflight.delete(ref.digest))
      this.#inflight.set(ref.digest, flight)
    }
    return await flight
  }

  async #fetchOnce (ref: ChunkRef, priority: 'demand' | 'prefetch'): Promise<Uint8Array> {
    this.fetches[priority]++
    this.fetches.chunks++
    await this.#beforeFetch?.([ref], priority)
    const data = this.#store.get(ref.digest)
    if (data === undefined) throw new NotFoundError(`chunk sha256:${ref.digest} not found in ${this.storeName}`)
    this.#fetchedBytes += ref.compressedLength
    if (sha256Hex(data) !== ref.digest) throw new CorruptObjectError(`chunk sha256:${ref.digest} from ${this.storeName} does not match its digest`)
    this.cache.set(ref.digest, data)
    return data
  }
}
