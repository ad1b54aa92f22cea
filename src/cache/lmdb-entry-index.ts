/**
 * The six databases of the lmdb chunk cache, and the index rows kept next to
 * the data (the module doc of lmdb-chunk-cache.ts has the table):
 * `frames`, `chunks` and `meta` hold the bytes; `access` (key → [atimeMs,
 * size, kind]) and `lru` ([atimeMs, key] → [size, kind]) are the index;
 * `info` holds the usage counters and the format version.
 *
 * Writes are issued here and committed by the caller: each method that
 * changes something returns lmdb-js's write promises, so that the caller
 * puts the data, both index rows and the counters into one transaction
 * (issued in one turn) and awaits them together.
 *
 * May import: src/errors.ts, ./cache-quota.ts (types), lmdb, node built-ins.
 */
import type { Database, RootDatabase } from 'lmdb'
import { UnsupportedError } from '../errors.js'
import type { CacheUsage, EntryKind, IndexedEntry } from './cache-quota.js'

/**
 * Bumped when the on-disk layout changes. 2 added `frames`; a format-1 cache
 * is a valid format-2 cache without frames, and is upgraded in place. A
 * newer format is refused (an older layerd must not misread it).
 */
export const LMDB_CACHE_FORMAT = 2

const KIND_CODES: Record<EntryKind, number> = { chunk: 0, meta: 1 }
const KINDS: EntryKind[] = ['chunk', 'meta']

/** An entry's `access` row. */
export type AccessRow = [atimeMs: number, size: number, kind: number]
type LruKey = [atimeMs: number, key: string]
/** An entry as coldest() lists it: with the access time of its lru row, so a later use is seen. */
export interface LruEntry extends IndexedEntry { atimeMs: number }

/** A new entry, as a batch writes it. */
export interface NewEntry { kind: EntryKind, key: string, bytes: Buffer, atimeMs: number, isFrame?: boolean }

/** The kind an access row names. */
export function rowKind (row: AccessRow): EntryKind { return KINDS[row[2]] ?? 'chunk' }

/** Whether an access row is an entry of `kind`. */
export function rowIs (row: AccessRow, kind: EntryKind): boolean { return row[2] === KIND_CODES[kind] }

export class LmdbEntryIndex {
  readonly #env: RootDatabase
  readonly #chunks: Database<Buffer, string>
  readonly #frames: Database<Buffer, string>
  readonly #meta: Database<Buffer, string>
  readonly #access: Database<AccessRow, string>
  readonly #lru: Database<[number, number], LruKey>
  readonly #info: Database<unknown, string>

  /**
   * Open the databases of `env` (the cache at `location`), recording the
   * format of a new or format-1 cache. Sync. Throws UnsupportedError (and
   * closes `env`) for a cache written in a newer format.
   */
  constructor (env: RootDatabase, location: string) {
    this.#env = env
    this.#chunks = env.openDB({ name: 'chunks', encoding: 'binary' })
    this.#frames = env.openDB({ name: 'frames', encoding: 'binary' })
    this.#meta = env.openDB({ name: 'meta', encoding: 'binary' })
    this.#access = env.openDB({ name: 'access' })
    this.#lru = env.openDB({ name: 'lru' })
    this.#info = env.openDB({ name: 'info' })
    const format = this.#info.get('format')
    if (format !== undefined && !(typeof format === 'number' && format <= LMDB_CACHE_FORMAT)) {
      void env.close()
      throw new UnsupportedError(`chunk cache ${location} has format ${String(format)}, this layerd reads ${LMDB_CACHE_FORMAT}: remove the directory`)
    }
    if (format !== LMDB_CACHE_FORMAT) this.#info.putSync('format', LMDB_CACHE_FORMAT)
  }

  /** A chunk's stored frame (stored-chunk.ts), or undefined when it is kept plain or absent. A plain view of lmdb's shared buffer: valid until the next read. Sync. */
  frame (digest: string): Buffer | undefined {
    // lmdb's shared buffer reports a patched `length`; use a plain view of it.
    const fast = this.#frames.getBinaryFast(digest)
    return fast === undefined ? undefined : fast.subarray(0, fast.length)
  }

  /** A chunk's plain bytes, or undefined. Valid until the next read, as frame(). Sync. */
  plainChunk (digest: string): Buffer | undefined {
    const fast = this.#chunks.getBinaryFast(digest)
    return fast === undefined ? undefined : fast.subarray(0, fast.length)
  }

  /** A metadata object's stored bytes (a copy), or undefined. Sync. */
  meta (key: string): Buffer | undefined {
    return this.#meta.getBinary(key)
  }

  /** The entry's access row, or undefined. Sync. */
  row (key: string): AccessRow | undefined {
    return this.#access.get(key)
  }

  /** Whether an entry of `kind` is committed under `key`. Sync. */
  holds (kind: EntryKind, key: string): boolean {
    const row = this.#access.get(key)
    return row !== undefined && rowIs(row, kind)
  }

  /** Issue the data and both index rows of a new entry. */
  insert ({ kind, key, bytes, atimeMs, isFrame }: NewEntry): Array<Promise<unknown>> {
    const code = KIND_CODES[kind]
    return [
      (isFrame === true ? this.#frames : this.#db(kind)).put(key, bytes),
      this.#access.put(key, [atimeMs, bytes.length, code]),
      this.#lru.put([atimeMs, key], [bytes.length, code])
    ]
  }

  /** Issue the removal of a present entry (its `row`): data, both index rows. */
  remove (key: string, [atimeMs, , code]: AccessRow): Array<Promise<unknown>> {
    const kind = KINDS[code] ?? 'chunk'
    return [
      this.#db(kind).remove(key),
      ...(kind === 'chunk' ? [this.#frames.remove(key)] : []),
      this.#access.remove(key),
      this.#lru.remove([atimeMs, key])
    ]
  }

  /** Issue the removal of an lru row whose entry went or was used since it was listed. */
  removeStaleLru (atimeMs: number, key: string): Promise<unknown> {
    return this.#lru.remove([atimeMs, key])
  }

  /** Issue a later access time for a present entry (its `row`): its lru row moves. */
  touch (key: string, [oldTime, size, code]: AccessRow, atimeMs: number): Array<Promise<unknown>> {
    return [
      this.#lru.remove([oldTime, key]),
      this.#lru.put([atimeMs, key], [size, code]),
      this.#access.put(key, [atimeMs, size, code])
    ]
  }

  /** Issue the usage counters. */
  putUsage (usage: CacheUsage): Promise<unknown> {
    return this.#info.put('usage', usage)
  }

  /** The committed entries, coldest first, from one snapshot. Sync iteration. */
  * coldest (): Iterable<LruEntry> {
    for (const { key, value } of this.#lru.getRange({ snapshot: true })) {
      yield { key: key[1], kind: KINDS[value[1]] ?? 'chunk', size: value[0], atimeMs: key[0] }
    }
  }

  /** The persisted counters, or a recount when they disagree with the index (an older crash, a failed batch). Sync. */
  loadUsage (): CacheUsage {
    const saved = this.#info.get('usage') as CacheUsage | undefined
    const rows = (this.#access.getStats() as { entryCount: number }).entryCount
    const data = [this.#chunks, this.#frames, this.#meta].reduce((n, db) => n + (db.getStats() as { entryCount: number }).entryCount, 0)
    const lru = (this.#lru.getStats() as { entryCount: number }).entryCount
    if (saved !== undefined && rows === data && rows === lru && saved.chunks + saved.metaObjects === rows) return saved
    return this.#rebuild()
  }

  /**
   * Make index and counters match the data again: data without an index
   * row becomes the coldest entry, index rows without data go. Sync; only
   * after an inconsistency, never on a normal open.
   */
  #rebuild (): CacheUsage {
    const usage: CacheUsage = { bytes: 0, chunks: 0, metaBytes: 0, metaObjects: 0 }
    this.#env.transactionSync(() => {
      this.#lru.clearSync()
      // Keys only: listing keys does not copy values out of the map.
      const present = KINDS.map(kind => new Set(this.#db(kind).getKeys({}) as Iterable<string>))
      for (const key of this.#frames.getKeys({}) as Iterable<string>) present[KIND_CODES.chunk]!.add(key)
      const dangling: string[] = []
      for (const { key, value } of this.#access.getRange({})) {
        if (!(present[value[2]]?.has(key) ?? false)) dangling.push(key)
      }
      for (const key of dangling) this.#access.removeSync(key)
      KINDS.forEach((kind, code) => {
        for (const key of present[code]!) {
          let row = this.#access.get(key)
          if (row === undefined || row[2] !== code) {
            row = [0, (kind === 'chunk' ? this.#frames.getBinaryFast(key) : undefined)?.length ?? this.#db(kind).getBinaryFast(key)?.length ?? 0, code]
            this.#access.putSync(key, row)
          }
          this.#lru.putSync([row[0], key], [row[1], row[2]])
          usage.bytes += row[1]
          if (kind === 'chunk') usage.chunks++
          else { usage.metaBytes += row[1]; usage.metaObjects++ }
        }
      })
      this.#info.putSync('usage', usage)
    })
    return usage
  }

  #db (kind: EntryKind): Database<Buffer, string> {
    return kind === 'chunk' ? this.#chunks : this.#meta
  }
}
