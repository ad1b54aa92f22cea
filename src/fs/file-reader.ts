/**
 * FileReader: file content for FUSE reads. Maps a byte range of a file onto
 * its chunk spans, copies cached chunks straight into the kernel's buffer,
 * and fetches the rest through a {@link ChunkReader}.
 *
 * - Hot path: when every chunk of the range is cached, read() returns the
 *   byte count synchronously: no promise, no await, no allocation beyond
 *   the cache's own view.
 * - A span is a byte range of a chunk, and one chunk may back several files
 *   (stream chunking), so copies are always span-relative.
 * - Files with several spans get an offset table on first read (binary
 *   search for the first span); one-span files need none.
 * - A read that misses also hints the next chunks of the same file to the
 *   fetcher at prefetch priority (sequential readers will want them).
 *
 * May import: src/errors.ts, src/format/.
 */
import { fuseReads } from '../metrics/counters.js'
import { resolveChunk, type ChunkRef, type LayerToc } from '../format/toc.js'
import type { MergedInode } from '../format/merge.js'

/**
 * What the filesystem needs from the chunk cache and fetcher (src/cache).
 * One instance per mount, so its counters are the mount's.
 */
export interface ChunkReader {
  /** Where chunks come from, for log lines (`s3://bucket/prefix`, a directory). */
  readonly storeName: string
  /**
   * The plain bytes of chunk `digest` (sha256 hex) if cached, else
   * undefined. Synchronous; never fetches. The view is only valid until the
   * next call into the reader: copy out of it at once.
   */
  getCached: (digest: string) => Uint8Array | undefined
  /**
   * Fetch chunks at demand priority (verified, inserted into the cache);
   * resolves with their plain bytes in `refs` order, owned by the caller.
   * Rejects with StoreUnavailableError (store unreachable; the message names
   * the chunk and the store), CorruptObjectError (bytes do not match their
   * digest, never served) or NotFoundError.
   */
  read: (refs: readonly ChunkRef[]) => Promise<Uint8Array[]>
  /** Warm these chunks in the background, behind demand reads. Never throws; failures are the reader's to log. */
  prefetch: (refs: readonly ChunkRef[]) => void
  /** Whether chunk `digest` is cached, without reading it. Sync. Optional: getCached() answers otherwise. */
  isCached?: (digest: string) => boolean
  /** Bytes fetched from the store for this reader so far. */
  fetchedBytes: () => number
}

export interface FileReaderCounters {
  /** Chunk lookups answered from the cache, and not. */
  chunkHits: number
  chunkMisses: number
  /** Read ops answered synchronously, and those that had to fetch. */
  syncReads: number
  fetchReads: number
}

/** How far a missing read hints ahead, in chunks and plain bytes (whichever ends first). */
export const READAHEAD_CHUNKS = 8
export const READAHEAD_BYTES_4MIB = 4 * 1024 * 1024

interface PendingSpan { span: number, filePos: number, length: number }

export class FileReader {
  readonly counters: FileReaderCounters = { chunkHits: 0, chunkMisses: 0, syncReads: 0, fetchReads: 0 }
  readonly #tocs: readonly LayerToc[]
  readonly #reader: ChunkReader
  /** Resolved chunk refs per layer, by chunk index; filled on first use. */
  readonly #refs: Array<Array<ChunkRef | undefined>>
  /** Start offset of every span (plus the file size at the end), by inode; only for multi-span files. */
  readonly #offsets: Array<Float64Array | undefined> = []

  constructor (tocs: readonly LayerToc[], reader: ChunkReader) {
    this.#tocs = tocs
    this.#reader = reader
    this.#refs = tocs.map(() => [])
  }

  /**
   * Copy up to `length` bytes of `inode`'s content from `position` into
   * `out`. Returns the byte count (0 at or past EOF) synchronously when
   * every chunk is cached, else a promise of it. The promise rejects with
   * the reader's errors; `out` is written until it settles.
   */
  read (inode: MergedInode, position: number, length: number, out: Buffer): number | Promise<number> {
    // Plain counters only (src/metrics/counters.ts); /metrics reads them at scrape time.
    const started = performance.now()
    fuseReads.requests++
    const result = this.#read(inode, position, length, out)
    if (typeof result === 'number') {
      fuseReads.bytes += result
      fuseReads.duration.observe((performance.now() - started) / 1000)
      return result
    }
    return result.then(n => {
      fuseReads.bytes += n
      fuseReads.duration.observe((performance.now() - started) / 1000)
      return n
    }, (err: unknown) => {
      fuseReads.errors++
      fuseReads.duration.observe((performance.now() - started) / 1000)
      throw err
    })
  }

  #read (inode: MergedInode, position: number, length: number, out: Buffer): number | Promise<number> {
    const entry = inode.entry
    const end = Math.min(entry.size, position + length)
    if (position >= end) return 0
    const spans = entry.spans!
    const layer = inode.layer
    const offsets = spans.length === 1 ? undefined : this.#offsetsOf(inode)
    let i = offsets === undefined ? 0 : firstSpanAt(offsets, position)
    let spanStart = offsets === undefined ? 0 : offsets[i]!
    let pending: PendingSpan[] | undefined
    let pos = position
    while (pos < end) {
      const span = spans[i]!
      const within = pos - spanStart
      const n = Math.min(span.length - within, end - pos)
      const data = this.#reader.getCached(this.#ref(layer, span.chunk).digest)
      if (data !== undefined) {
        this.counters.chunkHits++
        out.set(data.subarray(span.offset + within, span.offset + within + n), pos - position)
      } else {
        this.counters.chunkMisses++
        ;(pending ??= []).push({ span: i, filePos: pos, length: n })
      }
      pos += n
      spanStart += span.length
      i++
    }
    if (pending === undefined) {
      this.counters.syncReads++
      return end - position
    }
    this.counters.fetchReads++
    this.#prefetchAfter(inode, i)
    return this.#fetchInto(inode, position, pending, out).then(() => end - position)
  }

  /** Whether every chunk of `inode`'s content is in the cache (so reading it fetches nothing). Sync. */
  allCached (inode: MergedInode): boolean {
    const reader = this.#reader
    for (const span of inode.entry.spans ?? []) {
      const digest = this.#ref(inode.layer, span.chunk).digest
      if (!(reader.isCached?.(digest) ?? reader.getCached(digest) !== undefined)) return false
    }
    return true
  }

  /**
   * Short digests of the chunks under the range that are not cached, for
   * error messages. Sync; slow path only.
   */
  missingChunks (inode: MergedInode, position: number, length: number): string[] {
    const spans = inode.entry.spans ?? []
    const missing = new Set<string>()
    let start = 0
    for (const span of spans) {
      const end = start + span.length
      if (end > position && start < position + length) {
        const digest = this.#ref(inode.layer, span.chunk).digest
        if (this.#reader.getCached(digest) === undefined) missing.add(`sha256:${digest.slice(0, 12)}`)
      }
      start = end
    }
    return [...missing]
  }

  async #fetchInto (inode: MergedInode, position: number, pending: PendingSpan[], out: Buffer): Promise<void> {
    const spans = inode.entry.spans!
    const refs: ChunkRef[] = []
    const slot = new Map<string, number>()
    for (const p of pending) {
      const ref = this.#ref(inode.layer, spans[p.span]!.chunk)
      if (!slot.has(ref.digest)) { slot.set(ref.digest, refs.length); refs.push(ref) }
    }
    const chunks = await this.#reader.read(refs)
    for (const p of pending) {
      const span = spans[p.span]!
      const data = chunks[slot.get(this.#ref(inode.layer, span.chunk).digest)!]!
      const from = span.offset + (p.filePos - this.#spanStart(inode, p.span))
      out.set(data.subarray(from, from + p.length), p.filePos - position)
    }
  }

  /** Hint the chunks after span `from` of `inode` at prefetch priority. */
  #prefetchAfter (inode: MergedInode, from: number): void {
    const spans = inode.entry.spans!
    const refs: ChunkRef[] = []
    let bytes = 0
    let last = -1
    for (let i = from; i < spans.length && refs.length < READAHEAD_CHUNKS && bytes < READAHEAD_BYTES_4MIB; i++) {
      const chunk = spans[i]!.chunk
      if (chunk === last) continue
      last = chunk
      const ref = this.#ref(inode.layer, chunk)
      refs.push(ref)
      bytes += ref.length
    }
    if (refs.length > 0) this.#reader.prefetch(refs)
  }

  #ref (layer: number, chunk: number): ChunkRef {
    const known = this.#refs[layer]![chunk]
    if (known !== undefined) return known
    const ref = resolveChunk(this.#tocs[layer]!, chunk)
    this.#refs[layer]![chunk] = ref
    return ref
  }

  #spanStart (inode: MergedInode, span: number): number {
    return span === 0 ? 0 : this.#offsetsOf(inode)[span]!
  }

  #offsetsOf (inode: MergedInode): Float64Array {
    const known = this.#offsets[inode.ino]
    if (known !== undefined) return known
    const spans = inode.entry.spans!
    const offsets = new Float64Array(spans.length + 1)
    for (let i = 0; i < spans.length; i++) offsets[i + 1] = offsets[i]! + spans[i]!.length
    this.#offsets[inode.ino] = offsets
    return offsets
  }
}

/** Index of the span containing byte `position` (< file size). `offsets[i]` is span i's start. */
function firstSpanAt (offsets: Float64Array, position: number): number {
  let lo = 0
  let hi = offsets.length - 2
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1
    if (offsets[mid]! <= position) lo = mid
    else hi = mid - 1
  }
  return lo
}
