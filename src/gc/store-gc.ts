/**
 * `layerctl gc store`: mark from the roots, condemn what is unreachable,
 * wait for every writer that might still name it, mark again, and delete
 * only what is still unreachable and was last written before it was
 * condemned. The protocol with writers is src/store/store-leases.ts; the
 * argument that no ref can end up naming a deleted object is in README.md
 * of this folder.
 *
 *   1. clock: write gc/clock/<id>, its modification time is "now" on the
 *      store's clock; objects newer than now − grace are roots;
 *   2. list everything (paged), mark from the roots, C = the rest;
 *   3. put gc/condemned/<id> listing C; its modification time is T_c;
 *   4. list the leases; wait until each lease alive then has ended or expired;
 *   5. list and mark again; D = C − live − {modified ≥ T_c − 1 s};
 *   6. delete D (manifests and pointers first, blobs last), then the list.
 *
 * A dry run stops after 2. Compaction is not done (README.md, format
 * section: the figures that decided it); `repackedBlobs` is always 0 and the
 * report says how many blobs are over the threshold.
 *
 * May import: src/errors.ts, src/format/, src/store/, src/image/, this folder.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { ConflictError, NotFoundError } from '../errors.js'
import { BLOBS_PREFIX, GC_CLOCK_PREFIX, GC_CONDEMNED_PREFIX, GC_LEASES_PREFIX } from '../format/keys.js'
import type { ListedObject, ObjectStore } from '../store/object-store.js'
import { decodeLease, encodeCondemned, newLeaseId, storeNow } from '../store/store-leases.js'
import { inventory, kindOf, StoreGraph, type Marked, type ObjectKind } from './store-graph.js'
import type { LogLine } from '../log-line.js'

export const DEFAULT_GRACE_MS = 60 * 60 * 1000
export const DEFAULT_REPACK_THRESHOLD = 0.5
/** S3's LastModified has one-second resolution: an object written in the second of condemnation counts as written after it. */
const MODIFIED_MARGIN_MS = 1_000
/** gc gives up (deleting nothing) when a lease it waits for is still renewed after this long. */
export const DEFAULT_MAX_LEASE_WAIT_MS = 60 * 60 * 1000
/** A gc that has run longer than this deletes nothing more: a stalled gc must not wake up and delete (README.md). */
const MAX_RUN_MS = 2 * 60 * 60 * 1000
/** Another gc's condemned list older than this (store clock) is left over from a gc that died. */
const STALE_CONDEMNED_MS = 24 * 60 * 60 * 1000
const DELETE_CONCURRENCY = 16
const LEASE_POLL_MS = 200

/** Deletion order: what names others goes first, so a gc that dies midway leaves only unreferenced objects. */
const DELETE_ORDER: ObjectKind[] = ['manifest', 'block-view', 'trace', 'hint', 'tar-split', 'toc', 'blob-index', 'blob', 'other']

export interface StoreGcOptions {
  dryRun?: boolean
  /** Objects younger than this are kept (a margin only; correctness comes from leases). Default 1 h. */
  graceMs?: number
  /** Versions of each ref kept, newest first; default all. */
  keepHistory?: number
  /** Dead fraction of a live blob that counts it as a repack candidate (reported; no repack). Default 0.5. */
  repackThreshold?: number
  maxLeaseWaitMs?: number
  /** Progress lines. */
  log?: LogLine
}

export interface StoreGcResult {
  deletedObjects: number
  deletedBytes: number
  keptObjects: number
  keptBytes: number
  repackedBlobs: number
  seconds: number
  dryRun: boolean
  /** Deleted (or, in a dry run, deletable) objects and bytes by kind. */
  deletedByKind: Partial<Record<ObjectKind, { objects: number, bytes: number }>>
  /** Condemned but kept: named again by the second mark, or rewritten since condemnation. */
  rescuedObjects: number
  /** Writers' leases gc waited for. */
  waitedLeases: number
  /** Compressed bytes of dead chunks inside blobs that stay (what compaction could reclaim). */
  deadBytesInLiveBlobs: number
  /** Live blobs whose dead fraction is over the repack threshold. */
  blobsOverRepackThreshold: number
  /** Objects named by a root but missing from the store. */
  missing: string[]
}

/** Collect the store's garbage. Async. Throws what the store throws; ConflictError when a lease outlives maxLeaseWaitMs (nothing deleted). */
export async function gcStore (store: ObjectStore, opts: StoreGcOptions = {}): Promise<StoreGcResult> {
  const started = performance.now()
  const log = opts.log ?? (() => {})
  const id = newLeaseId()
  const graph = new StoreGraph(store)
  try {
    const now = await storeNow(store, id)
    const graceMs = opts.graceMs ?? DEFAULT_GRACE_MS
    const markOpts = {
      ...(opts.keepHistory === undefined ? {} : { keepHistory: opts.keepHistory }),
      rootsSince: new Date(now.getTime() - graceMs)
    }
    const objects = await inventory(store)
    const first = await graph.mark(objects, markOpts)
    const condemned = [...objects.keys()].filter(k => !first.live.has(k))
    log(`gc ${id}: ${objects.size} objects, ${first.live.size} live, ${condemned.length} unreachable`)
    if (opts.dryRun === true || condemned.length === 0) {
      return report(objects, condemned, first, opts, started, { rescued: 0, waited: 0, dryRun: opts.dryRun === true })
    }

    const condemnedKey = GC_CONDEMNED_PREFIX + id
    await store.put(condemnedKey, encodeCondemned(id, condemned))
    try {
      const tc = (await store.stat(condemnedKey))?.modified
      if (tc === undefined) throw new ConflictError(`gc ${id}: its condemned list ${condemnedKey} vanished right after it was written`)
      const waited = await waitForLeases(store, id, opts.maxLeaseWaitMs ?? DEFAULT_MAX_LEASE_WAIT_MS, log)

      const again = await inventory(store)
      const second = await graph.mark(again, { ...markOpts })
      const cutoff = tc.getTime() - MODIFIED_MARGIN_MS
      const doomed = condemned.filter(k => {
        const o = again.get(k)
        return o !== undefined && !second.live.has(k) && o.modified.getTime() < cutoff
      })
      const rescued = condemned.filter(k => again.has(k)).length - doomed.length
      log(`gc ${id}: waited for ${waited} lease(s); deleting ${doomed.length}, ${rescued} condemned objects were rescued`)
      await deleteAll(store, doomed, started)
      await removeStaleCondemned(store, id, now)
      return report(again, doomed, second, opts, started, { rescued, waited, dryRun: false }, objects)
    } finally {
      await store.delete(condemnedKey)
    }
  } finally {
    await store.delete(GC_CLOCK_PREFIX + id).catch(() => {})
  }
}

/**
 * Wait until every lease alive now (on the store's clock) is gone or
 * expired. Leases written after this listing need no wait: their writers
 * read the condemned list. Returns how many leases were waited for. Async.
 */
async function waitForLeases (store: ObjectStore, id: string, maxWaitMs: number, log: LogLine): Promise<number> {
  const now = (await storeNow(store, id)).getTime()
  const waitFor = new Map<string, number>() // key → ttl
  for await (const o of store.listObjects(GC_LEASES_PREFIX)) {
    const ttl = await leaseTtl(store, o)
    if (ttl === undefined) continue
    if (o.modified.getTime() + ttl > now) waitFor.set(o.key, ttl)
    else if (o.modified.getTime() + 2 * ttl < now) await store.delete(o.key) // a writer that died long ago
  }
  const count = waitFor.size
  const started = performance.now()
  let logged = 0
  while (waitFor.size > 0) {
    if (performance.now() - started > maxWaitMs) {
      throw new ConflictError(`gc ${id}: ${waitFor.size} writer lease(s) were still renewed after ${(maxWaitMs / 1000).toFixed(0)} s (${[...waitFor.keys()].slice(0, 3).join(', ')}); nothing was deleted`)
    }
    if (performance.now() - logged > 10_000) { log(`gc ${id}: waiting for ${waitFor.size} writer(s) to finish`); logged = performance.now() }
    await sleep(LEASE_POLL_MS)
    const clock = (await storeNow(store, id)).getTime()
    const present = new Map<string, ListedObject>()
    for await (const o of store.listObjects(GC_LEASES_PREFIX)) present.set(o.key, o)
    for (const [key, ttl] of waitFor) {
      const o = present.get(key)
      if (o === undefined || o.modified.getTime() + ttl <= clock) waitFor.delete(key)
    }
  }
  return count
}

async function leaseTtl (store: ObjectStore, o: ListedObject): Promise<number | undefined> {
  try {
    return decodeLease(await store.get(o.key), `${o.key} in ${store.url}`).ttlMs
  } catch (err) {
    if (err instanceof NotFoundError) return undefined // released since the listing
    throw err
  }
}

async function deleteAll (store: ObjectStore, keys: string[], started: number): Promise<void> {
  for (const kind of DELETE_ORDER) {
    const batch = keys.filter(k => kindOf(k) === kind)
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < batch.length) {
        if (performance.now() - started > MAX_RUN_MS) {
          throw new ConflictError(`gc ran for more than ${MAX_RUN_MS / 3_600_000} h; it stops deleting (its condemned list may be stale); run it again`)
        }
        await store.delete(batch[next++]!)
      }
    }
    await Promise.all(Array.from({ length: Math.min(DELETE_CONCURRENCY, batch.length) }, worker))
  }
}

/** Remove other gcs' condemned lists left over for a day (their gc died); store clock. Async. */
async function removeStaleCondemned (store: ObjectStore, id: string, now: Date): Promise<void> {
  for await (const o of store.listObjects(GC_CONDEMNED_PREFIX)) {
    if (o.key !== GC_CONDEMNED_PREFIX + id && o.modified.getTime() + STALE_CONDEMNED_MS < now.getTime()) await store.delete(o.key)
  }
}

function report (objects: ReadonlyMap<string, ListedObject>, deleted: string[], marked: Marked, opts: StoreGcOptions, started: number,
  extra: { rescued: number, waited: number, dryRun: boolean }, before?: ReadonlyMap<string, ListedObject>): StoreGcResult {
  const gone = new Set(deleted)
  const byKind: StoreGcResult['deletedByKind'] = {}
  let deletedBytes = 0
  let keptObjects = 0
  let keptBytes = 0
  for (const key of deleted) {
    const size = objects.get(key)?.size ?? before?.get(key)?.size ?? 0
    const k = (byKind[kindOf(key)] ??= { objects: 0, bytes: 0 })
    k.objects++
    k.bytes += size
    deletedBytes += size
  }
  for (const [key, o] of objects) if (!gone.has(key)) { keptObjects++; keptBytes += o.size }
  const threshold = opts.repackThreshold ?? DEFAULT_REPACK_THRESHOLD
  let dead = 0
  let over = 0
  for (const [key, o] of objects) {
    if (!key.startsWith(BLOBS_PREFIX) || gone.has(key) || !marked.live.has(key)) continue
    const liveBytes = marked.liveChunkBytes.get(key.slice(BLOBS_PREFIX.length)) ?? 0
    const d = Math.max(0, o.size - liveBytes)
    dead += d
    if (o.size > 0 && d / o.size > threshold) over++
  }
  return {
    deletedObjects: deleted.length,
    deletedBytes,
    keptObjects,
    keptBytes,
    repackedBlobs: 0,
    seconds: (performance.now() - started) / 1000,
    dryRun: extra.dryRun,
    deletedByKind: byKind,
    rescuedObjects: extra.rescued,
    waitedLeases: extra.waited,
    deadBytesInLiveBlobs: dead,
    blobsOverRepackThreshold: over,
    missing: marked.missing
  }
}
