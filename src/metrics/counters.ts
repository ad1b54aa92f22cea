/**
 * Plain counters for the hot paths, read by the Prometheus registry only at
 * scrape time (daemon-metrics.ts). Incrementing one is an array or field
 * add: no label hashing, no allocation, nothing prom-client does per call.
 *
 * One set per process (the daemon is one per node). Counters only grow.
 *
 * May import: nothing.
 */

/** Upper bounds (seconds) of the FUSE read duration histogram: 50 µs … 10 s. */
export const FUSE_READ_BUCKETS: readonly number[] = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10]

/** A histogram as plain numbers: counts per bucket (not cumulative), sum and count. */
export class PlainHistogram {
  readonly bounds: readonly number[]
  /** counts[i]: observations ≤ bounds[i] and > bounds[i-1]; the last slot is +Inf. */
  readonly counts: Float64Array
  sum = 0
  count = 0

  constructor (bounds: readonly number[]) {
    this.bounds = bounds
    this.counts = new Float64Array(bounds.length + 1)
  }

  /** Record one value (seconds). Sync, allocation-free. */
  observe (value: number): void {
    const b = this.bounds
    let i = 0
    while (i < b.length && value > b[i]!) i++
    this.counts[i]!++
    this.sum += value
    this.count++
  }
}

/** FUSE requests that reach JavaScript: READ (the kernel backend answers every other op in C). */
export const fuseReads = {
  requests: 0,
  bytes: 0,
  errors: 0,
  duration: new PlainHistogram(FUSE_READ_BUCKETS)
}

export type StoreOpName = 'get' | 'getRange' | 'put' | 'stat' | 'list' | 'delete'
export type StoreResult = 'ok' | 'not_found' | 'error'
export const STORE_OPS: readonly StoreOpName[] = ['get', 'getRange', 'put', 'stat', 'list', 'delete']
export const STORE_RESULTS: readonly StoreResult[] = ['ok', 'not_found', 'error']

/** Object-store requests of this process, by op and result (src/store/metered-object-store.ts counts them). */
export const storeRequests: Record<StoreOpName, Record<StoreResult, number>> = Object.fromEntries(
  STORE_OPS.map(op => [op, { ok: 0, not_found: 0, error: 0 }])) as Record<StoreOpName, Record<StoreResult, number>>


/** Upper bounds (seconds) of the sandbox create duration histogram: 10 ms … 2 min (a VM under TCG takes tens of seconds). */
export const SANDBOX_CREATE_BUCKETS: readonly number[] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120]

/**
 * Sandbox creations by tier, as their creators report them to the daemon
 * (control method `sandboxCreated`: a sandbox is made in its caller's
 * process, so only the caller can time it).
 */
export const sandboxCreates = new Map<string, PlainHistogram>()

/** At most this many tier series: a buggy client naming tiers at random cannot grow the exposition without bound. */
export const MAX_SANDBOX_TIERS = 16

/** Record one creation of `tier` that took `seconds`. Sync. Returns false (nothing recorded) past MAX_SANDBOX_TIERS distinct tiers. */
export function observeSandboxCreate (tier: string, seconds: number): boolean {
  let h = sandboxCreates.get(tier)
  if (h === undefined) {
    if (sandboxCreates.size >= MAX_SANDBOX_TIERS) return false
    h = new PlainHistogram(SANDBOX_CREATE_BUCKETS)
    sandboxCreates.set(tier, h)
  }
  h.observe(seconds)
  return true
}
