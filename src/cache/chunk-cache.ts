/**
 * The node chunk cache: chunks by the sha256 of their plain bytes, plus small
 * content-addressed metadata objects (layer TOCs, manifests), shared by every
 * mount of the node.
 *
 * The cache/ folder:
 * - `chunk-cache.ts` (this file): the `ChunkCache` interface, its stats, and
 *   the insert-time checks every backend applies.
 * - `lmdb-chunk-cache.ts`: persistent, memory-mapped (lmdb); the daemon's.
 * - `memory-chunk-cache.ts`: a Map; tests and one-off commands.
 * - `cache-quota.ts`: size cap, watermarks, pins, LRU eviction, proactive
 *   reclaim. Kept apart from the backends, which only store and index.
 * - `chunk-fetcher.ts` (+ `range-planner.ts`, `fetch-scheduler.ts`,
 *   `chunk-decoder.ts`): the read path below the cache: singleflight, merged
 *   range GETs, verify-before-insert, demand before prefetch.
 * - `README.md`: design decisions and measured figures.
 *
 * Invariant: an entry's key is the sha256 of its bytes (hex for chunks,
 * `<prefix>/<hex>` for metadata). Backends check it on insert, so a bug or a
 * lying store above can never make the cache serve wrong bytes later.
 *
 * May import: src/errors.ts, src/format/, src/store/ (types). Nothing above.
 */
import { CorruptObjectError, UsageError } from '../errors.js'
import { isHex256, sha256Hex } from '../format/digest.js'

export interface ChunkCacheStats {
  /** Bytes held, chunks and metadata together (the figure the cap applies to). */
  bytes: number
  /** Number of chunks held. */
  chunks: number
  /** Bytes and number of metadata objects held (included in `bytes`). */
  metaBytes: number
  metaObjects: number
  /** Metadata objects currently pinned. */
  pinned: number
  /** get()/getMeta() answered from the cache, and not. */
  hits: number
  misses: number
  /** Entries removed to respect the cap (not explicit delete()s). */
  evictions: number
  /** put()s that did not store because the cap was reached and nothing could be evicted (or the eviction could not commit). */
  rejected: number
  /** Entries accepted by put() that a backend writing in batches then failed to store (full disk): dropped, logged. */
  writeErrors: number
  /** Commits that failed (full disk, EIO, read-only remount, map full): each one counted, the cause logged once per episode. */
  writeFailures: number
  /** New entries not written because the backend's writes were failing (their chunks were served all the same). */
  skippedWrites: number
  /** Whether the backend's writes are failing now (it caches again after the first commit that succeeds). */
  writesFailing: boolean
  /** The cap, in bytes; Infinity when uncapped. */
  capBytes: number
  /** On-disk footprint (lmdb: pages in use); equals `bytes` for memory backends. */
  diskBytes: number
}

export interface PutOptions {
  /**
   * The caller has just computed sha256(bytes) itself and it matched: skip
   * the cache's own check. Only the fetcher, right after verifying, sets it.
   */
  verified?: boolean
  /**
   * The caller hands `plain` over and never changes it again (the fetcher's
   * freshly decoded, read-only chunks): a backend that keeps bytes in
   * memory before writing them may keep this buffer instead of a copy.
   */
  transfer?: boolean
  /**
   * The zstd frame that `plain` was just decoded from and verified against
   * (only the fetcher passes it). A persistent backend may store the frame
   * instead of the plain bytes (lmdb does when it is smaller); `get()`
   * still returns plain bytes. The frame is copied before put() returns.
   */
  frame?: Uint8Array
}

export interface PutMetaOptions extends PutOptions {
  /** Add one pin (see pin()) as part of the insert. */
  pinned?: boolean
}

export interface ChunkCache {
  /** Where the cache lives, for messages: a directory, or `memory`. */
  readonly location: string

  /**
   * The plain bytes of chunk `digest` (sha256 hex), or undefined. Synchronous:
   * a FUSE read hit never awaits.
   *
   * Buffer lifetime: the result is a READ-ONLY view that stays valid only
   * until the next call into this cache (any method) or the next await /
   * callback, whichever comes first. Copy what you need out of it at once
   * (`view.copy(fuseBuf, …)`); call `Buffer.from(view)` to keep it. (lmdb
   * reuses one buffer for every get: one memcpy out of the map and no
   * allocation.) Counts a hit or a miss and marks the entry recently used.
   */
  get: (digest: string) => Buffer | undefined

  /** Whether chunk `digest` is cached. Sync. Counts nothing. */
  has: (digest: string) => boolean

  /**
   * Insert chunk `digest`. Async; resolves once the entry is stored (visible
   * to get()), or skipped: already present, or the cap is reached and nothing
   * is evictable (`stats().rejected`). A cache is best-effort: callers must
   * not rely on the entry staying. A persistent backend may write it to disk
   * a moment later, in a batch (lmdb: within `writeDelayMs`; a crash loses
   * at most the last batches; a failed batch counts in `stats().writeErrors`).
   *
   * Checks sha256(plain) === digest unless `verified` is set: throws
   * CorruptObjectError on mismatch (nothing stored), UsageError for a
   * malformed digest or a closed cache, LimitExceededError or
   * CacheIoError if a backend that writes at once cannot write (a
   * batching backend logs and counts the failure instead).
   * Do not mutate `plain` until the promise settles (ever, with `transfer`).
   */
  put: (digest: string, plain: Uint8Array, options?: PutOptions) => Promise<void>

  /** Remove chunk `digest`; removing a missing chunk is not an error. Async. */
  delete: (digest: string) => Promise<void>

  /**
   * A metadata object (`layers/<hex>`, `manifests/<hex>`: its stored, still
   * compressed bytes) or undefined. Sync. The result is a copy owned by the caller.
   */
  getMeta: (key: string) => Buffer | undefined

  /**
   * Insert a metadata object. Async, like put(). The key must be
   * `<prefix>/<sha256 hex of bytes>`; checked unless `verified`. With
   * `pinned`, adds one pin. Pinned objects are stored even above the cap.
   */
  putMeta: (key: string, bytes: Uint8Array, options?: PutMetaOptions) => Promise<void>

  /**
   * Pins are reference counts held in memory by this process: each pin() of
   * a key needs one unpin(). A pinned metadata object is never evicted. Pins
   * do not survive a restart: the daemon re-pins what it re-mounts. Sync.
   * Pinning a key that is not (yet) cached is allowed and protects it once
   * inserted.
   */
  pin: (keys: Iterable<string>) => void
  unpin: (keys: Iterable<string>) => void

  /** A snapshot of the counters. Sync. */
  stats: () => ChunkCacheStats

  /**
   * Evict cold entries down to the low watermark now (what the reclaim
   * timer does). Async; resolves with the number of entries evicted.
   */
  reclaim: () => Promise<number>

  /**
   * Remove every metadata object (TOC, manifest) no pin holds: what `layerctl
   * gc node` frees of images no longer mounted here (a later mount reads them
   * from the store again). Async; resolves with what was (with `dryRun`:
   * would be) removed.
   */
  dropUnpinnedMeta: (options?: { dryRun?: boolean }) => Promise<{ objects: number, bytes: number }>

  /**
   * Persist access times and flush pending writes, then release the cache.
   * Idempotent; after close every other method throws UsageError.
   */
  close: () => Promise<void>
}

/** Longest metadata key accepted (lmdb keys are limited to ~1.9 KB). */
export const MAX_META_KEY_LENGTH = 256
const META_KEY_RE = /^[a-z][a-z0-9-]*\/([0-9a-f]{64})$/

/** Throws UsageError unless `digest` is 64 lowercase hex characters. Sync. */
export function assertChunkDigest (digest: string, location: string): void {
  if (!isHex256(digest)) {
    throw new UsageError(`cache ${location}: chunk id ${JSON.stringify(String(digest)).slice(0, 80)} is not a sha256 hex digest`)
  }
}

/** The hex digest inside a metadata key; throws UsageError for keys that are not `<prefix>/<hex>`. Sync. */
export function metaKeyDigest (key: string, location: string): string {
  const m = typeof key === 'string' && key.length <= MAX_META_KEY_LENGTH ? META_KEY_RE.exec(key) : null
  if (m === null) {
    throw new UsageError(`cache ${location}: metadata key ${JSON.stringify(String(key)).slice(0, 80)} is not <prefix>/<sha256 hex>`)
  }
  return m[1]!
}

/**
 * The cache's insert-time check: throws CorruptObjectError unless
 * sha256(bytes) is `digest`. `what` names the entry for the message. Sync.
 */
export function assertContentMatches (digest: string, bytes: Uint8Array, what: string, location: string): void {
  const actual = sha256Hex(bytes)
  if (actual !== digest) {
    throw new CorruptObjectError(`cache ${location} refused ${what}: its bytes hash to sha256:${actual}`)
  }
}
