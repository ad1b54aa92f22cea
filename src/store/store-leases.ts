/**
 * Store leases: how writers (push, commit, tag, rebase, block views) and
 * `layerctl gc store` stay out of each other's way on a store that has no
 * locks and no atomic rename (S3), whatever gc's grace period is.
 *
 * A writer, before it looks at the store:
 *   1. puts `gc/leases/<id>` (its lease), and renews it every ttl/3;
 *   2. reads every `gc/condemned/<gc id>` list, and from then on never reuses
 *      a condemned object (it does not dedup against a condemned blob, and
 *      rewrites a condemned TOC or manifest it needs, which gives it a fresh
 *      modification time);
 *   3. before its commit point (the ref, or a block-view pointer), checks
 *      that its last successful renewal started less than ttl/2 ago, and
 *      fails with ConflictError otherwise;
 *   4. deletes its lease.
 *
 * gc, the other side (src/gc/store-gc.ts), condemns first, then reads the
 * leases, waits for every lease it saw to end, marks again, and deletes only
 * condemned objects that are still unreachable and were last written before
 * it condemned them. Either a writer reads the condemned list (step 2
 * after gc's put) or gc sees the writer's lease (step 1 before gc's listing):
 * the two puts come before the two reads on each side, and S3 (since 2020),
 * MinIO, s3rver and a local directory are strongly consistent for puts,
 * gets and listings. The whole argument is in src/gc/README.md.
 *
 * Times: lease expiry is judged by gc on the store's clock only (a lease's
 * modification time against the time of an object gc has just written), and
 * by the writer on its own monotonic clock (time since it sent the renewal).
 * No two machines' clocks are compared.
 *
 * May import: src/errors.ts, src/format/, ./object-store.ts.
 */
import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { gunzipSync, gzipSync } from 'node:zlib'
import { ConflictError, CorruptObjectError, NotFoundError } from '../errors.js'
import { BLOBS_PREFIX, GC_CLOCK_PREFIX, GC_CONDEMNED_PREFIX, GC_LEASES_PREFIX } from '../format/keys.js'
import type { ObjectStore } from './object-store.js'

/** A lease not renewed for this long is dead to gc. */
export const DEFAULT_LEASE_TTL_MS = 60_000

/** What a lease object says (JSON). */
export interface LeaseRecord { v: 1, what: string, host: string, pid: number, ttlMs: number, started: string }

/** A condemned list object (gzip(JSON)). */
export interface CondemnedRecord { v: 1, gc: string, keys: string[] }

export type LeaseStore = Pick<ObjectStore, 'put' | 'get' | 'delete' | 'list' | 'url'>

/** A fresh id that sorts by creation time: `<ms base36>-<random hex>`. */
export function newLeaseId (): string {
  return `${Date.now().toString(36).padStart(9, '0')}-${randomBytes(6).toString('hex')}`
}

export class StoreLease {
  readonly id: string
  readonly key: string
  /** Keys of every object some running gc has condemned, as read right after the lease was written. */
  readonly condemned: ReadonlySet<string>
  readonly #store: LeaseStore
  readonly #ttlMs: number
  readonly #what: string
  readonly #record: Buffer
  #lastRenewalSent: number
  #timer: NodeJS.Timeout | undefined
  #renewing: Promise<void> | undefined
  #released = false

  private constructor (store: LeaseStore, id: string, what: string, ttlMs: number, record: Buffer, sent: number, condemned: Set<string>) {
    this.#store = store
    this.id = id
    this.key = GC_LEASES_PREFIX + id
    this.#what = what
    this.#ttlMs = ttlMs
    this.#record = record
    this.#lastRenewalSent = sent
    this.condemned = condemned
  }

  /**
   * Write a lease for `what` (a phrase for messages: "push of deb/python:v3"),
   * then read the condemned lists. Async; throws what the store throws.
   */
  static async acquire (store: LeaseStore, what: string, opts: { ttlMs?: number } = {}): Promise<StoreLease> {
    const ttlMs = opts.ttlMs ?? DEFAULT_LEASE_TTL_MS
    const id = newLeaseId()
    const record: LeaseRecord = { v: 1, what, host: hostname(), pid: process.pid, ttlMs, started: new Date().toISOString() }
    const bytes = Buffer.from(JSON.stringify(record))
    const sent = performance.now()
    await store.put(GC_LEASES_PREFIX + id, bytes)
    let condemned: Set<string>
    try {
      condemned = await readCondemned(store)
    } catch (err) {
      await store.delete(GC_LEASES_PREFIX + id).catch(() => {})
      throw err
    }
    const lease = new StoreLease(store, id, what, ttlMs, bytes, sent, condemned)
    lease.#schedule()
    return lease
  }

  /** True when a running gc may delete `key`: reuse it only by writing it again. Sync. */
  isCondemned (key: string): boolean {
    return this.condemned.has(key)
  }

  /** Hex digests of the condemned blobs: dedup must not place chunks in them. Sync. */
  condemnedBlobs (): string[] {
    return [...this.condemned].filter(k => k.startsWith(BLOBS_PREFIX)).map(k => k.slice(BLOBS_PREFIX.length))
  }

  /**
   * Throws ConflictError unless the lease is certainly still alive for gc:
   * its last renewal was sent less than ttl/2 ago (the other half is the
   * margin for the commit write's own latency). Call right before a commit
   * point. Sync.
   */
  assertValid (): void {
    const age = performance.now() - this.#lastRenewalSent
    if (this.#released || age > this.#ttlMs / 2) {
      throw new ConflictError(`${this.#what}: its gc lease ${this.key} in ${this.#store.url} was not renewed for ${(age / 1000).toFixed(1)} s ` +
        `(limit ${(this.#ttlMs / 2000).toFixed(0)} s), so a concurrent \`layerctl gc store\` may have collected what it uses; nothing was committed, run it again`)
    }
  }

  /** Stop renewing and delete the lease. Idempotent; never throws (a leftover lease expires). Async. */
  async release (): Promise<void> {
    if (this.#released) return
    this.#released = true
    clearTimeout(this.#timer)
    await this.#renewing?.catch(() => {})
    await this.#store.delete(this.key).catch(() => {})
  }

  #schedule (): void {
    this.#timer = setTimeout(() => {
      this.#renewing = this.#renew().finally(() => { this.#renewing = undefined; if (!this.#released) this.#schedule() })
    }, this.#ttlMs / 3)
    this.#timer.unref()
  }

  async #renew (): Promise<void> {
    const sent = performance.now()
    try {
      await this.#store.put(this.key, this.#record)
      if (!this.#released) this.#lastRenewalSent = sent
    } catch {
      // Not renewed: assertValid() refuses to commit once it is too old.
    }
  }
}

/** Run `fn` holding a lease; the lease is released however `fn` ends. Async. */
export async function withStoreLease<T> (store: LeaseStore, what: string, fn: (lease: StoreLease) => Promise<T>, opts: { ttlMs?: number } = {}): Promise<T> {
  const lease = await StoreLease.acquire(store, what, opts)
  try {
    return await fn(lease)
  } finally {
    await lease.release()
  }
}

/** Every key on every condemned list in the store. Async; a list deleted while being read is skipped. */
export async function readCondemned (store: Pick<ObjectStore, 'get' | 'list' | 'url'>): Promise<Set<string>> {
  const keys = new Set<string>()
  for await (const listKey of store.list(GC_CONDEMNED_PREFIX)) {
    let bytes: Buffer
    try { bytes = await store.get(listKey) } catch (err) {
      if (err instanceof NotFoundError) continue
      throw err
    }
    for (const key of decodeCondemned(bytes, `${listKey} in ${store.url}`).keys) keys.add(key)
  }
  return keys
}

export function encodeCondemned (gc: string, keys: string[]): Buffer {
  return gzipSync(JSON.stringify({ v: 1, gc, keys } satisfies CondemnedRecord))
}

/** Throws CorruptObjectError naming `source`. Sync. */
export function decodeCondemned (bytes: Uint8Array, source: string): CondemnedRecord {
  let doc: any
  try { doc = JSON.parse(gunzipSync(bytes).toString('utf8')) } catch (err) {
    throw new CorruptObjectError(`condemned list ${source} does not decode`, { cause: err })
  }
  if (doc?.v !== 1 || typeof doc.gc !== 'string' || !Array.isArray(doc.keys) || !doc.keys.every((k: unknown) => typeof k === 'string')) {
    throw new CorruptObjectError(`condemned list ${source} is malformed`)
  }
  return doc as CondemnedRecord
}

/** Throws CorruptObjectError naming `source`. Sync. */
export function decodeLease (bytes: Uint8Array, source: string): LeaseRecord {
  let doc: any
  try { doc = JSON.parse(Buffer.from(bytes).toString('utf8')) } catch (err) {
    throw new CorruptObjectError(`lease ${source} is not valid JSON`, { cause: err })
  }
  if (doc?.v !== 1 || typeof doc.what !== 'string' || !Number.isSafeInteger(doc.ttlMs) || doc.ttlMs <= 0) throw new CorruptObjectError(`lease ${source} is malformed`)
  return doc as LeaseRecord
}

/**
 * The store's clock now: write `gc/clock/<id>` and read its modification
 * time back (S3 LastModified, fs mtime). Async.
 */
export async function storeNow (store: Pick<ObjectStore, 'put' | 'stat' | 'delete'>, id: string): Promise<Date> {
  const key = GC_CLOCK_PREFIX + id
  await store.put(key, Buffer.from(new Date().toISOString()))
  const st = await store.stat(key)
  if (st === undefined) throw new ConflictError(`the clock object ${key} vanished right after it was written`)
  return st.modified
}
