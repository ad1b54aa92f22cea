/**
 * MemoryReclaimer: proactive reclaim of the node's memory that layerd put
 * there, before the kernel has to. Every `intervalMs` it reads the memory
 * gauge (src/host/memory-pressure.ts: this process's cgroup, or the node,
 * page cache included) and PSI. While use is over `targetBytes`:
 *   - `overTarget` is true, and layerd drops its own page-cache copies of
 *     image data as it makes them (page-copies.ts: the store's pages after a
 *     read, lmdb's after a commit): a byte sandboxes read is then in memory
 *     once, in the image file's page cache on the mount;
 *   - each time its anonymous memory has grown by `collectGrowthBytes` over
 *     its low point since the last collection, it runs one (`collect`: a full
 *     GC, then malloc_trim). Growth is looked at every `collectCheckMs`
 *     (50 ms: one read of /proc/self/statm), on a timer of its own that a
 *     pass in progress does not hold up: with the 250 ms pass timer, and no
 *     look while a settle ran (200+ ms), a fast cold wave grew layerd by
 *     20+ MB between two looks. A cold wave's fetch and decode buffers die soon,
 *     but V8 frees an ArrayBuffer's memory only at a GC that finds it dead
 *     (it starts one for external memory only after 64 MiB of growth), and
 *     glibc keeps freed chunks in its arenas until a trim: in
 *     bench/node-memory.ts layerd's anonymous memory stood ~20 MB above its
 *     level after the wave at the node's peak. One GC of the daemon's small
 *     heap costs a few ms, against a settle's 10–150;
 *   - when a burst of chunk reads ends (`activity` moved by `burstMinReads`
 *     or more, then stood still for `burstQuietMs`: 250 ms), a settling pass
 *     at once (at most one per `burstSettleGapMs`, counted from the last
 *     burst's settle: a periodic settle during the burst does not hold it
 *     up), with the chunk cache
 *     pages the burst wrote flushed and dropped without their wait
 *     (`flushWrites`). A cold wave's node peak comes as it ends: every file
 *     is in the sandboxes' page cache and their programs start, while
 *     layerd still held the wave's buffers and its last 0.5–1 s of lmdb
 *     pages (bench/node-memory.ts: 20–25 MB above its level after the
 *     wave) until the next 2 s settle. Looked at on the growth timer;
 *   - it runs passes. A pass:
 *     1. at most once per `settleEveryMs`, settles the daemon (decoded-chunk
 *        LRU, read buffers, GC, malloc_trim; a settle blocks the event loop
 *        for a GC: 10–150 ms) and drops the chunk cache file's page cache
 *        (MADV_DONTNEED on lmdb's read-only map, then POSIX_FADV_DONTNEED on
 *        data.mdb: the pages chunk-cache hits read back since);
 *     2. only when PSI says tasks stalled on memory (`some avg10` ≥
 *        `psiThreshold`), or when asked (`reclaim()`), drops the page cache
 *        of image files no sandbox has made the kernel read for `coldMs`
 *        (FUSE_NOTIFY_INVAL_INODE through our kernel FUSE server,
 *        src/fs/kernel-fuse.ts). Over a mere target it does not: those pages
 *        are the sandboxes' working set, and the kernel sees a page-cache hit
 *        where we do not, so a file read only from the page cache looks cold;
 *        dropping it at the target cost the sandboxes 1.4–2.3x the
 *        page-cache misses in bench/node-memory.ts (src/daemon/README.md).
 *
 * What it does not do: sandboxes' own memory. Under cgroup v2 that would be
 * `memory.reclaim` on an idle sandbox's group; this host's memory controller
 * is v1, which has no proactive reclaim: `memory.force_empty` reclaims a
 * group's page cache but, with no swap, loops on its anonymous pages and
 * fails EBUSY, and lowering `memory.limit_in_bytes` reclaims the same page
 * cache and then OOM-kills or fails. Both only free page cache, which step 2
 * drops for image files (see src/daemon/README.md).
 *
 * May import: src/host/, src/fs/ (kernel-fuse), node built-ins.
 */
import { closeSync, openSync, readFileSync } from 'node:fs'
import type { MemoryGauge, MemoryReading } from '../../host/memory-pressure.js'
import type { ReclaimStats } from '../client/control-protocol.js'
import { nativeMemory } from '../../native.js'
import { dropColdPageCache } from '../../fs/kernel-fuse.js'

export interface MemoryReclaimerOptions {
  gauge: MemoryGauge
  /** Reclaim when the gauge's use is above this. */
  targetBytes: number
  /** The daemon's own settle (MemorySettler.settle). */
  settle: () => Promise<void>
  /** Called when use crosses the target, either way (the daemon shrinks its decoded-chunk cache while over). */
  overTargetChanged?: (over: boolean) => void
  /** One full GC and a malloc_trim (MemorySettler.collect). */
  collect?: () => void
  /** Growth of this process's anonymous memory (/proc/self/statm: resident − shared) over its low point since the last collection that runs one while over the target. Default 2 MiB: a larger step leaves a cold wave's dead buffers in layerd through the node's peak (figures: bench/README.md, "Node memory"). */
  collectGrowthBytes?: number
  /** How often anonymous memory growth is looked at while over the target. Default 50 ms. */
  collectCheckMs?: number
  /** A counter that moves with the mounts' chunk reads (cache hits + misses): a burst's end settles at once. Default: none (no burst ends). */
  activity?: () => number
  /** Reads of `activity` that make a burst. Default 256 (a cold wave makes ~19,000; a warm sandbox a few dozen). */
  burstMinReads?: number
  /** Stillness of `activity` that ends a burst. Default 250 ms. */
  burstQuietMs?: number
  /** A burst's settle comes at least this long after the last burst's settle (a periodic settle does not count: it came before the burst's last reads). Default 1000 ms (settles every 1 s cost +59% time in bench/node-memory). */
  burstSettleGapMs?: number
  /** At a burst's end, after the settle: flush and drop the chunk cache pages commits wrote, now (PageCopyDropper.dropWrittenNow). Not at the periodic settles: during a burst, hits read the pages just written. */
  flushWrites?: () => Promise<void>
  /** Files whose page cache is dropped outright at each pass (the chunk cache's lmdb file). */
  cacheFiles: () => string[]
  /** Image files not read for this long lose their page cache at a pass. Default 30 s (5 s cost 2.3x the page-cache misses in bench/node-memory: see src/daemon/README.md). */
  coldMs?: number
  /** A pass settles the daemon at most this often. Default 2000 ms. */
  settleEveryMs?: number
  /** How often pressure is read. Default 250 ms. */
  intervalMs?: number
  /** PSI `some avg10` (percent) that counts as pressure even under the target. Default 1. */
  psiThreshold?: number
  log?: (line: string) => void
}


export const DEFAULT_RECLAIM_COLD_MS = 30_000
const DEFAULT_SETTLE_EVERY_MS = 2000
const DEFAULT_INTERVAL_MS = 250
const DEFAULT_PSI_THRESHOLD = 1
const DEFAULT_COLLECT_GROWTH_BYTES = 2 * 1024 * 1024
const DEFAULT_COLLECT_CHECK_MS = 50
const DEFAULT_BURST_MIN_READS = 256
const DEFAULT_BURST_QUIET_MS = 250
const DEFAULT_BURST_SETTLE_GAP_MS = 1000

export class MemoryReclaimer {
  readonly #o: Required<Omit<MemoryReclaimerOptions, 'log' | 'collect' | 'overTargetChanged' | 'activity'>> & Pick<MemoryReclaimerOptions, 'overTargetChanged' | 'activity'> & { log: (line: string) => void, collect: () => void }
  readonly #timer: NodeJS.Timeout
  /** Runs only while over the target. */
  #collectTimer: NodeJS.Timeout | undefined
  #running: Promise<void> | undefined
  #lastSettle = -Infinity
  #overTarget = false
  #anonBase = Infinity
  /** The burst watch: `activity` at the last look, when it last moved, and at the last burst's end. */
  #reads: number | undefined
  #readsMovedAt = 0
  #burstFrom = 0
  /** When the last burst's end settled (the gap between two of them). */
  #lastBurstSettle = -Infinity
  readonly stats: ReclaimStats

  constructor (options: MemoryReclaimerOptions) {
    this.#o = {
      coldMs: DEFAULT_RECLAIM_COLD_MS,
      settleEveryMs: DEFAULT_SETTLE_EVERY_MS,
      intervalMs: DEFAULT_INTERVAL_MS,
      psiThreshold: DEFAULT_PSI_THRESHOLD,
      collectGrowthBytes: DEFAULT_COLLECT_GROWTH_BYTES,
      collectCheckMs: DEFAULT_COLLECT_CHECK_MS,
      burstMinReads: DEFAULT_BURST_MIN_READS,
      burstQuietMs: DEFAULT_BURST_QUIET_MS,
      burstSettleGapMs: DEFAULT_BURST_SETTLE_GAP_MS,
      flushWrites: async () => {},
      collect: () => {},
      log: () => {},
      ...options
    }
    this.stats = { targetBytes: options.targetBytes, gauge: options.gauge.source, passes: 0, filesDropped: 0, collections: 0, burstEnds: 0 }
    this.#timer = setInterval(() => this.#check(), this.#o.intervalMs)
    this.#timer.unref()
  }

  /** True when `reading` calls for a pass. */
  underPressure (reading: MemoryReading): boolean {
    return reading.usedBytes > this.#o.targetBytes || (reading.psiSomeAvg10 ?? 0) >= this.#o.psiThreshold
  }

  /** True while the last reading was over the target: layerd's own page-cache copies are dropped as they are made (page-copies.ts). Sync. */
  get overTarget (): boolean { return this.#overTarget }

  #check (): void {
    if (this.#running !== undefined) return
    const reading = this.#o.gauge.read()
    this.stats.lastReading = reading
    const over = reading.usedBytes > this.#o.targetBytes
    if (over !== this.#overTarget) {
      this.#overTarget = over
      this.#watchGrowth(over)
      try { this.#o.overTargetChanged?.(over) } catch (err) { this.#o.log(`reclaim: ${(err as Error).message}`) }
    }
    // Image files' page cache only under a stall: over a mere target it is the sandboxes' working set, and dropping it costs them hot reads.
    if (this.underPressure(reading)) void this.#start(this.#o.coldMs, false, (reading.psiSomeAvg10 ?? 0) >= this.#o.psiThreshold)
  }

  /** The growth look's timer (and the burst watch's): on while over the target, off under it. */
  #watchGrowth (on: boolean): void {
    clearInterval(this.#collectTimer)
    this.#collectTimer = undefined
    this.#anonBase = Infinity
    this.#reads = undefined
    if (!on) return
    this.#collectTimer = setInterval(() => { this.#collectIfGrown(); this.#settleIfBurstEnded() }, this.#o.collectCheckMs)
    this.#collectTimer.unref()
  }

  /** While over the target: a settling pass once a burst of chunk reads has ended (see the module doc). */
  #settleIfBurstEnded (): void {
    if (this.#o.activity === undefined) return
    const reads = this.#o.activity()
    const now = performance.now()
    if (this.#reads === undefined) { this.#reads = this.#burstFrom = reads; return }
    if (reads !== this.#reads) { this.#reads = reads; this.#readsMovedAt = now; return }
    if (reads - this.#burstFrom < this.#o.burstMinReads || now - this.#readsMovedAt < this.#o.burstQuietMs) return
    // A settle since the burst's last read already gave its memory back.
    if (this.#lastSettle > this.#readsMovedAt) { this.#burstFrom = reads; return }
    // Busy, or a burst's end settled a moment ago: the next look tries again. Only a burst end's settle counts for
    // the gap: a periodic one came during the burst (its last reads came after it), and waiting out the gap from
    // there held the wave's memory through the node's peak (bench/node-memory.ts: ~10 MB of layerd's anonymous
    // memory and its last lmdb pages for up to 1 s after the last read, while the sandboxes' programs started).
    if (this.#running !== undefined || now - this.#lastBurstSettle < this.#o.burstSettleGapMs) return
    this.#burstFrom = reads
    this.#lastBurstSettle = now
    this.stats.burstEnds = (this.stats.burstEnds ?? 0) + 1
    void this.#start(this.#o.coldMs, true, false, true)
  }

  /** While over the target: a collection once anonymous memory grew by collectGrowthBytes over its low point since the last one. */
  #collectIfGrown (): void {
    if (!this.#overTarget) { this.#anonBase = Infinity; return }
    const anon = anonymousBytes()
    // The low point since the last collection (V8 frees dead buffers' memory on a background thread after the GC, the trim follows).
    this.#anonBase = Math.min(this.#anonBase, anon)
    if (anon - this.#anonBase < this.#o.collectGrowthBytes) return
    try { this.#o.collect() } catch (err) { this.#o.log(`reclaim: collection failed: ${(err as Error).message}`) }
    this.stats.collections = (this.stats.collections ?? 0) + 1
    this.#anonBase = Infinity
  }

  /** One pass now (whatever the pressure), image files included. Concurrent calls share it. Never rejects (failures are logged). */
  async reclaim (coldMs = this.#o.coldMs, settle = false): Promise<void> {
    await this.#start(coldMs, settle, true)
  }

  async #start (coldMs: number, settle: boolean, imageFiles: boolean, flushWrites = false): Promise<void> {
    this.#running ??= this.#pass(coldMs, settle, imageFiles, flushWrites).finally(() => { this.#running = undefined })
    await this.#running
  }

  /** `flushWrites`: a burst's end, when no hit is coming that the pages just written would serve. */
  async #pass (coldMs: number, settle: boolean, imageFiles: boolean, flushWrites: boolean): Promise<void> {
    const started = performance.now()
    const before = this.#o.gauge.read().usedBytes
    if (settle || started - this.#lastSettle >= this.#o.settleEveryMs) {
      this.#lastSettle = started
      await this.#o.settle()
      if (flushWrites) await this.#o.flushWrites()
      // With the settle (which unmapped lmdb's map from layerd): the pages chunk-cache hits read back since the last one.
      for (const file of this.#o.cacheFiles()) dropFilePageCache(file, this.#o.log)
    }
    const dropped = imageFiles ? await dropColdPageCache(coldMs) : { files: 0 }
    const s = this.stats
    s.passes++
    s.filesDropped += dropped.files
    s.lastPassAt = new Date().toISOString()
    s.lastPassMs = performance.now() - started
    s.lastUsedBeforeBytes = before
    s.lastUsedAfterBytes = this.#o.gauge.read().usedBytes
  }

  /** Stop watching. Idempotent. */
  close (): void {
    clearInterval(this.#timer)
    clearInterval(this.#collectTimer)
  }
}

const PAGE_BYTES = 4096

/** This process's anonymous resident memory in bytes: /proc/self/statm's resident − shared pages (one small read; RssAnon without the status file's other fields). */
function anonymousBytes (): number {
  const [, resident, shared] = readFileSync('/proc/self/statm', 'latin1').split(' ').map(Number)
  return ((resident ?? 0) - (shared ?? 0)) * PAGE_BYTES
}

/** Unmap `file`'s read-only shared maps from this process, then POSIX_FADV_DONTNEED on all of it (clean, unmapped pages leave the page cache). Logs failures. */
function dropFilePageCache (file: string, log: (line: string) => void): void {
  let fd: number | undefined
  try {
    const native = nativeMemory()
    native.adviseMappedFile(file, 'unmap')
    fd = openSync(file, 'r')
    native.fadviseDontNeed(fd, 0, 0)
  } catch (err) {
    log(`reclaim: cannot drop the page cache of ${file}: ${(err as Error).message}`)
  } finally {
    if (fd !== undefined) closeSync(fd)
  }
}
