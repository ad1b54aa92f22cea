/**
 * ChunkFetcher: the read path below the cache. For chunks the cache lacks:
 * - singleflight: one fetch per chunk, however many readers wait for it;
 * - misses planned in the same event-loop turn (one read, or concurrent
 *   FUSE reads) merge into one range GET per run of nearby chunks of a blob
 *   (range-planner.ts);
 * - each chunk is decompressed and its sha256 checked BEFORE it is returned
 *   or cached (chunk-decoder.ts); a mismatch is a CorruptObjectError,
 *   counted, never cached or returned;
 * - demand reads have their own concurrency and never queue behind
 *   prefetch (fetch-scheduler.ts);
 * - a failed GET keeps its class (the store classified it: unavailable,
 *   access denied as UsageError, NotFoundError for a missing blob…) with
 *   the chunk and the store in front of its message and the store's error
 *   as its cause; a failure that is not a LayerdError is a bug, wrapped as
 *   InternalError with its cause (and stack). A GET slower than
 *   `fetchTimeoutMs` fails with StoreUnavailableError instead of hanging.
 *   No retries here: a retrying store sits below if wanted. A store that
 *   stays unavailable is logged once per outage, not once per failed GET
 *   (store-outage.ts).
 *
 * Counters: `fetcher.stats` counts for the node; a consumer (one FUSE mount)
 * passes its own FetchStats sink to read()/prefetch()/getCached() and gets
 * the same counters for its own traffic. `fetchedBytes` goes to the sink of
 * the reader that started the GET; a reader joining a fetch already in
 * flight counts a miss but no bytes.
 *
 * May import: src/errors.ts, src/format/, src/store/ (types), ./ siblings.
 */
import { CorruptObjectError, InternalError, LayerdError, NotFoundError, StoreUnavailableError, UsageError, asLayerdError, withContext } from '../errors.js'
import { blobKey } from '../format/keys.js'
import type { ChunkRef } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import type { ChunkCache } from './chunk-cache.js'
import { decodeChunk, describeChunk } from './chunk-decoder.js'
import { FetchScheduler, type FetchJob, type FetchPriority } from './fetch-scheduler.js'
import { StoreOutage } from './store-outage.js'
import { DEFAULT_MAX_GAP_BYTES, DEFAULT_MAX_RUN_BYTES, planRanges, type RangeRun } from './range-planner.js'
import type { LogLine } from '../log-line.js'

export type { FetchPriority } from './fetch-scheduler.js'

/** Counters of one consumer (or of the whole node). Plain numbers; read them any time. */
export interface FetchStats {
  /** Chunks answered from the cache, and not (fetched, or joined a fetch in flight). */
  hits: number
  misses: number
  /** Range GETs issued, and the compressed bytes they returned (gaps included). */
  fetches: number
  fetchedBytes: number
  /** Chunks whose bytes in the store failed decompression or sha256: never served. */
  corruptChunks: number
  /** GETs that failed (unreachable store, missing blob, timeout). */
  storeErrors: number
  /** Chunks brought into the cache by prefetch(). */
  prefetchedChunks: number
}

export function newFetchStats (): FetchStats {
  return { hits: 0, misses: 0, fetches: 0, fetchedBytes: 0, corruptChunks: 0, storeErrors: 0, prefetchedChunks: 0 }
}

export interface ChunkFetcherOptions {
  /** Concurrent GETs for readers. Default 8. */
  demandConcurrency?: number
  /** Concurrent GETs for prefetch, used only when no demand GET waits. Default 2. */
  prefetchConcurrency?: number
  /** Merge chunks of a blob separated by at most this many bytes. Default 64 KiB. */
  maxGapBytes?: number
  /** Largest range GET. Default 8 MiB. */
  maxRangeBytes?: number
  /** A GET still unanswered after this long fails with StoreUnavailableError. Default 30,000. */
  fetchTimeoutMs?: number
  /** One line per failed GET, corrupt chunk or failed cache write (an unavailable store: one per outage). Default: none. */
  log?: LogLine
}

export interface ReadOptions {
  /** Default 'demand'. */
  priority?: FetchPriority
  /** The consumer's counters (e.g. one mount's), in addition to the node's. */
  stats?: FetchStats
}

/** `length` plain bytes at `offset` of chunk `ref`: one TOC span, resolved. */
export interface ChunkPiece { ref: ChunkRef, offset: number, length: number }

export interface PrefetchResult {
  /** Chunks asked for, already cached, fetched now, and failed (errors are counted, not thrown). */
  requested: number
  cached: number
  fetched: number
  failed: number
}

/** One chunk being fetched: every reader of it awaits `promise`. */
interface Pending {
  ref: ChunkRef
  promise: Promise<Buffer>
  resolve: (plain: Buffer) => void
  reject: (err: Error) => void
  priority: FetchPriority
  /** Sinks of the readers waiting; the first started the fetch. */
  sinks: FetchStats[]
  job: RunJob | undefined
  /** Resolves once the fetch is over: chunk written to the cache (or the write failed), or fetch failed. */
  settled: Promise<void>
  settle: () => void
}

interface RunJob extends FetchJob { run: () => Promise<void>, range: RangeRun<ChunkRef>, pendings: Pending[] }

export const DEFAULT_DEMAND_CONCURRENCY = 8
export const DEFAULT_PREFETCH_CONCURRENCY = 2
export const DEFAULT_FETCH_TIMEOUT_MS = 30_000
/** Longest stretch of decoding before the fetcher yields to the event loop. */
const DECODE_SLICE_MS = 2

export class ChunkFetcher {
  /** The node-wide counters. */
  readonly stats: FetchStats = newFetchStats()
  readonly #store: Pick<ObjectStore, 'getRange' | 'url' | 'remote'>
  readonly #cache: ChunkCache
  readonly #scheduler: FetchScheduler
  readonly #plan: { maxGapBytes: number, maxRunBytes: number }
  readonly #timeoutMs: number
  readonly #log: LogLine
  readonly #inflight = new Map<string, Pending>()
  #unplanned: Pending[] = []
  #planScheduled = false
  #closed = false
  #closing: Promise<void> | undefined
  /** Cache writes that failed (full disk, closed cache); the chunk was still served. */
  cacheWriteErrors = 0
  /** Whether the store answers; logs each outage once (store-outage.ts). */
  readonly outage: StoreOutage

  constructor (store: Pick<ObjectStore, 'getRange' | 'url' | 'remote'>, cache: ChunkCache, options: ChunkFetcherOptions = {}) {
    this.#store = store
    this.#cache = cache
    this.#scheduler = new FetchScheduler({
      demand: options.demandConcurrency ?? DEFAULT_DEMAND_CONCURRENCY,
      prefetch: options.prefetchConcurrency ?? DEFAULT_PREFETCH_CONCURRENCY
    })
    this.#plan = { maxGapBytes: options.maxGapBytes ?? DEFAULT_MAX_GAP_BYTES, maxRunBytes: options.maxRangeBytes ?? DEFAULT_MAX_RUN_BYTES }
    this.#timeoutMs = options.fetchTimeoutMs ?? DEFAULT_FETCH_TIMEOUT_MS
    this.#log = options.log ?? (() => {})
    this.outage = new StoreOutage(store.url, this.#log)
  }

  /** Chunks being fetched right now (singleflight entries). */
  get inflight (): number { return this.#inflight.size }

  /**
   * The hot path: chunk `digest` from the cache, or undefined. Sync. Counts
   * a hit (not a miss: the caller goes on to read(), which counts it). The
   * buffer follows ChunkCache.get()'s lifetime: a read-only view valid until
   * the next call into the cache; copy out of it at once.
   */
  /** The store's capability (ObjectStore.remote): true when each GET is a network round trip. */
  get remoteStore (): boolean {
    return this.#store.remote === true
  }

  getCached (digest: string, stats?: FetchStats): Buffer | undefined {
    const view = this.#cache.get(digest)
    if (view !== undefined) { this.stats.hits++; if (stats !== undefined) stats.hits++ }
    return view
  }

  /**
   * The plain bytes of each ref, in order. Async. Hits are copied out of the
   * cache; misses are fetched (see the module doc). Resolved buffers are
   * READ-ONLY (one may be shared by every reader of that chunk, and is being
   * written to the cache) and stay valid as long as they are referenced.
   * Rejects with the first failure: CorruptObjectError, StoreUnavailableError,
   * NotFoundError (blob missing from the store), UsageError (closed, or the
   * store refused access), any other LayerdError the store threw, with
   * context; InternalError for a bug.
   */
  read (refs: readonly ChunkRef[], options: ReadOptions = {}): Promise<Buffer[]> {
    if (this.#closed) return Promise.reject(new UsageError('cannot read chunks: the chunk fetcher is closed'))
    const priority = options.priority ?? 'demand'
    const sink = options.stats
    const out = new Array<Buffer | Promise<Buffer>>(refs.length)
    for (let i = 0; i < refs.length; i++) {
      const ref = refs[i]!
      const view = this.#cache.get(ref.digest)
      if (view !== undefined) {
        this.stats.hits++
        if (sink !== undefined) sink.hits++
        out[i] = Buffer.from(view)
        continue
      }
      this.stats.misses++
      if (sink !== undefined) sink.misses++
      out[i] = this.#join(ref, priority, sink).promise
    }
    return Promise.all(out)
  }

  /**
   * Copy `pieces` (byte ranges of chunks, in order) back to back into
   * `target` from offset 0: the whole FUSE read in one call. Returns the byte
   * count SYNCHRONOUSLY when every chunk is cached (no await on a hit), else
   * a promise of it once the missing chunks are fetched. Errors as read();
   * throws RangeError when `target` is too small or a piece lies outside its chunk.
   */
  readInto (pieces: readonly ChunkPiece[], target: Uint8Array, options: ReadOptions = {}): number | Promise<number> {
    let pos = 0
    let missing: number[] | undefined
    const starts = new Array<number>(pieces.length)
    for (let i = 0; i < pieces.length; i++) {
      const p = pieces[i]!
      if (p.offset < 0 || p.length < 0 || p.offset + p.length > p.ref.length || pos + p.length > target.length) {
        throw new RangeError(`piece ${i} (${p.offset}+${p.length} of chunk ${p.ref.digest}, ${p.ref.length} bytes) does not fit`)
      }
      starts[i] = pos
      const view = this.getCached(p.ref.digest, options.stats)
      if (view !== undefined) view.copy(target, pos, p.offset, p.offset + p.length)
      else (missing ??= []).push(i)
      pos += p.length
    }
    if (missing === undefined) return pos
    const wanted = missing
    return this.read(wanted.map(i => pieces[i]!.ref), options).then(bufs => {
      bufs.forEach((b, k) => { const p = pieces[wanted[k]!]!; b.copy(target, starts[wanted[k]!]!, p.offset, p.offset + p.length) })
      return pos
    })
  }

  /**
   * Warm the cache with `refs` in the background, behind every demand read.
   * Async; never rejects for fetch failures (they are counted in the result
   * and the stats), only with UsageError when closed.
   */
  async prefetch (refs: readonly ChunkRef[], options: Pick<ReadOptions, 'stats'> = {}): Promise<PrefetchResult> {
    if (this.#closed) throw new UsageError('cannot prefetch: the chunk fetcher is closed')
    const result: PrefetchResult = { requested: refs.length, cached: 0, fetched: 0, failed: 0 }
    const waits: Array<Promise<void>> = []
    const seen = new Set<string>()
    for (const ref of refs) {
      if (seen.has(ref.digest)) { result.cached++; continue }
      seen.add(ref.digest)
      if (this.#cache.has(ref.digest)) { result.cached++; continue }
      const p = this.#join(ref, 'prefetch', options.stats)
      // Done means cached (or failed), so a read right after is a hit.
      waits.push(p.promise.then(async () => { await p.settled; result.fetched++ }, () => { result.failed++ }))
    }
    await Promise.all(waits)
    return result
  }

  /** Resolves when nothing is being fetched or written to the cache. Async. */
  async idle (): Promise<void> {
    while (this.#planScheduled || this.#inflight.size > 0) {
      if (this.#planScheduled) await new Promise(resolve => setImmediate(resolve))
      await this.#scheduler.idle()
      if (!this.#planScheduled && this.#inflight.size > 0) await new Promise(resolve => setImmediate(resolve))
    }
  }

  /**
   * Stop: queued fetches fail with UsageError, running ones finish (their
   * chunks are still cached). Idempotent. Async.
   */
  close (): Promise<void> {
    this.#closing ??= this.#close()
    return this.#closing
  }

  async #close (): Promise<void> {
    this.#closed = true
    const err = (): UsageError => new UsageError('chunk fetch cancelled: the chunk fetcher is closed')
    for (const p of this.#unplanned) this.#fail(p, err())
    this.#unplanned = []
    for (const job of this.#scheduler.drain() as RunJob[]) for (const p of job.pendings) this.#fail(p, err())
    await this.#scheduler.idle()
  }

  /** The pending fetch of `ref`, joined or started. Sync. */
  #join (ref: ChunkRef, priority: FetchPriority, sink: FetchStats | undefined): Pending {
    let p = this.#inflight.get(ref.digest)
    if (p !== undefined) {
      if (sink !== undefined && !p.sinks.includes(sink)) p.sinks.push(sink)
      if (priority === 'demand' && p.priority === 'prefetch') {
        p.priority = 'demand'
        if (p.job !== undefined) this.#scheduler.promote(p.job)
      }
      return p
    }
    let resolve!: (b: Buffer) => void
    let reject!: (e: Error) => void
    const promise = new Promise<Buffer>((res, rej) => { resolve = res; reject = rej })
    promise.catch(() => {}) // a prefetch-only fetch may have nobody awaiting it
    let settle!: () => void
    const settled = new Promise<void>(res => { settle = res })
    p = { ref, promise, resolve, reject, priority, sinks: sink === undefined ? [] : [sink], job: undefined, settled, settle }
    this.#inflight.set(ref.digest, p)
    this.#unplanned.push(p)
    if (!this.#planScheduled) {
      this.#planScheduled = true
      // setImmediate, not a microtask: FUSE reads arriving in the same poll phase merge too.
      setImmediate(() => this.#planPending())
    }
    return p
  }

  #planPending (): void {
    this.#planScheduled = false
    const pendings = this.#unplanned
    this.#unplanned = []
    for (const priority of ['demand', 'prefetch'] as const) {
      const group = pendings.filter(p => p.priority === priority)
      if (group.length === 0) continue
      const byRef = new Map(group.map(p => [p.ref, p]))
      for (const range of planRanges(group.map(p => p.ref), this.#plan)) {
        const job: RunJob = {
          priority,
          state: 'queued',
          range,
          pendings: range.chunks.map(r => byRef.get(r)!),
          run: async () => await this.#runJob(job)
        }
        for (const p of job.pendings) p.job = job
        this.#scheduler.submit(job)
      }
    }
  }

  async #runJob (job: RunJob): Promise<void> {
    const { range } = job
    const starter = job.pendings[0]?.sinks[0]
    let data: Buffer
    try {
      data = await this.#getRange(range)
    } catch (err) {
      this.stats.storeErrors++
      if (starter !== undefined) starter.storeErrors++
      for (const p of job.pendings) {
        const e = this.#fetchError(err, p.ref, range)
        if (e instanceof CorruptObjectError) this.#countCorrupt(p)
        this.#fail(p, e)
      }
      const first = this.#fetchError(err, job.pendings[0]!.ref, range)
      if (first instanceof StoreUnavailableError) this.outage.failed(first)
      else this.#log(first.message, 'warn')
      return
    }
    this.outage.answered()
    this.stats.fetches++
    this.stats.fetchedBytes += data.length
    if (starter !== undefined) { starter.fetches++; starter.fetchedBytes += data.length }
    const writes: Array<Promise<void>> = []
    let sliceStart = performance.now()
    for (const p of job.pendings) {
      if (performance.now() - sliceStart > DECODE_SLICE_MS) {
        // An 8 MiB run is ~100 chunks of decode + sha256: let FUSE hits in between.
        await new Promise(resolve => setImmediate(resolve))
        sliceStart = performance.now()
      }
      const start = p.ref.offset - range.offset
      const frame = data.subarray(start, start + p.ref.compressedLength)
      let plain: Buffer
      try {
        plain = decodeChunk(frame, p.ref, this.#store.url)
      } catch (err) {
        const e = asLayerdError(err, `cannot decode ${describeChunk(p.ref, this.#store.url)}`)
        if (e instanceof CorruptObjectError) this.#countCorrupt(p)
        this.#log(e.message, 'warn')
        this.#fail(p, e)
        continue
      }
      if (p.priority === 'prefetch') {
        this.stats.prefetchedChunks++
        for (const s of p.sinks) s.prefetchedChunks++
      }
      p.resolve(plain)
      // The entry stays in flight until the cache has it, so no reader falls in the gap and fetches again.
      // `plain` is read-only from here on (readers share it): the cache may keep it without a copy.
      writes.push(this.#cache.put(p.ref.digest, plain, { verified: true, transfer: true, frame }).catch(err => {
        this.cacheWriteErrors++
        this.#log(`could not cache ${describeChunk(p.ref, this.#store.url)}: ${(err as Error).message}`, 'warn')
      }).finally(() => {
        if (this.#inflight.get(p.ref.digest) === p) this.#inflight.delete(p.ref.digest)
        p.settle()
      }))
    }
    await Promise.all(writes)
  }

  async #getRange (range: RangeRun<ChunkRef>): Promise<Buffer> {
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new StoreUnavailableError(`no answer after ${this.#timeoutMs} ms`)), this.#timeoutMs)
    })
    try {
      const data = await Promise.race([this.#store.getRange(blobKey(range.blob), range.offset, range.length), timeout])
      if (data.length !== range.length) {
        throw new CorruptObjectError(`the store returned ${data.length} bytes for a range of ${range.length}`)
      }
      return data
    } finally {
      clearTimeout(timer)
    }
  }

  /** The error a reader of `ref` gets when the GET of `range` failed with `err`. */
  #fetchError (err: unknown, ref: ChunkRef, range: RangeRun<ChunkRef>): LayerdError {
    const what = `cannot fetch chunk ${ref.digest} (blob ${range.blob} bytes ${range.offset}+${range.length}) from store ${this.#store.url}`
    if (err instanceof NotFoundError) return new NotFoundError(`${what}: the blob is not in the store`, { cause: err })
    if (err instanceof LayerdError) return withContext(err, what)
    return new InternalError(`${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
  }

  #countCorrupt (p: Pending): void {
    this.stats.corruptChunks++
    for (const s of p.sinks) s.corruptChunks++
  }

  #fail (p: Pending, err: Error): void {
    if (this.#inflight.get(p.ref.digest) === p) this.#inflight.delete(p.ref.digest)
    p.reject(err)
    p.settle()
  }
}
