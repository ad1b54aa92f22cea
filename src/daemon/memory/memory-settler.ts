/**
 * MemorySettler: the memory a burst of work took goes back to the system
 * when the burst ends. A burst (reads through the mounts, an export, a pull)
 * leaves garbage ArrayBuffers that V8 frees only at its next full GC, free
 * chunks inside glibc's arenas that malloc keeps, decoded chunks kept for
 * hits, and the lmdb map's pages mapped into the daemon. Once the daemon's
 * work counter has not moved for `idleMs`, the settler, in order:
 *   1. runs every registered release hook (the decoded-chunk cache, …);
 *   2. unmaps the lmdb map's pages from the daemon (madvise MADV_DONTNEED on
 *      the read-only shared map: they stay in the page cache, a later hit
 *      faults them back in, nothing is lost);
 *   3. runs a full V8 GC, which frees the garbage buffers (their memory is
 *      freed on a V8 background thread shortly after);
 *   4. 200 ms later, malloc_trim(0): the arenas' free pages go back to the kernel;
 *   5. unmaps the clean pages of the node binary's and the libraries' text and
 *      read-only data (MADV_DONTNEED on private non-writable file maps with no
 *      private copy, native/memory.c). Start-up touches ~40 MB of node's 99 MB
 *      binary that an idle daemon never runs again; they stay in the page
 *      cache (shared with every node process), and what the daemon does run
 *      faults back in (minor faults, no disk read). RSS counts only the mapped
 *      pages, so this is a cut in RSS, not in the node's page cache: the pages
 *      are unmapped, clean page cache the kernel can reclaim at once.
 * One settle per burst; and while quiet, again whenever RSS has grown by
 * `regrowBytes` since the last settle (work the counter does not see: the
 * cache's access-time flush, an export's last writes, lmdb's write thread).
 * `settle()` does the same at once (after an export, a failed request …).
 *
 * Cost: a settle blocks the event loop for one full GC of a small heap and
 * one trim (10–150 ms here), only after `idleMs` of quiet, so never during a burst.
 *
 * May import: src/native.ts, node built-ins.
 */
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { nativeMemory, type NativeMemory } from '../../native.js'
import type { LogLine } from '../../log-line.js'
import { SETTLE_CHECK_MS, SETTLE_IDLE_MS, SETTLE_REGROW_BYTES, TRIM_DELAY_MS } from './upkeep-constants.js'

export interface MemorySettlerOptions {
  /** A counter that moves with the daemon's work (cache hits + misses, requests served …). */
  activity: () => number
  /** Quiet time after a burst before its memory is given back. Default SETTLE_IDLE_MS (upkeep-constants.ts). */
  idleMs?: number
  /** How often the counter is looked at. Default SETTLE_CHECK_MS (upkeep-constants.ts). */
  checkMs?: number
  /** RSS growth since the last settle that settles again while quiet. Default SETTLE_REGROW_BYTES (upkeep-constants.ts). */
  regrowBytes?: number
  /** Files whose read-only shared mappings are unmapped at a settle (the lmdb map). */
  mappedFiles?: () => string[]
  log?: LogLine
}

export interface SettleStats {
  settles: number
  lastSettleAt?: string
  /** RSS just before and just after the last settle, bytes. */
  lastRssBeforeBytes?: number
  lastRssAfterBytes?: number
  lastSettleMs?: number
}


/**
 * V8's gc(), exposed at run time (the daemon is not started with --expose-gc). The flag is set back at
 * once: a flag changed at run time changes V8's flag hash, and a code cache written after it would be
 * refused at the next start (src/start/cached-script.cts).
 */
function exposeGc (): () => void {
  setFlagsFromString('--expose-gc')
  try { return runInNewContext('gc') as () => void } finally { setFlagsFromString('--no-expose-gc') }
}

/** /proc/self/statm's resident pages, in bytes (cheap: no smaps walk). */
function rssNow (): number {
  return process.memoryUsage.rss()
}

export class MemorySettler {
  readonly #activity: () => number
  readonly #idleMs: number
  readonly #regrowBytes: number
  readonly #mappedFiles: () => string[]
  readonly #log: LogLine
  readonly #hooks: Array<() => void> = []
  readonly #gc: () => void
  readonly #native: NativeMemory | undefined
  readonly #timer: NodeJS.Timeout
  #lastCount: number
  #quietSince = performance.now()
  #dirty = true
  #settling: Promise<void> | undefined
  #trimTimer: NodeJS.Timeout | undefined
  readonly stats: SettleStats = { settles: 0 }

  constructor (options: MemorySettlerOptions) {
    this.#activity = options.activity
    this.#idleMs = options.idleMs ?? SETTLE_IDLE_MS
    this.#regrowBytes = options.regrowBytes ?? SETTLE_REGROW_BYTES
    this.#mappedFiles = options.mappedFiles ?? (() => [])
    this.#log = options.log ?? (() => {})
    this.#gc = exposeGc()
    try { this.#native = nativeMemory() } catch (err) {
      this.#log(`memory: malloc trim and map advice unavailable (${(err as Error).message})`, 'warn')
    }
    this.#lastCount = this.#activity()
    this.#timer = setInterval(() => this.#check(), options.checkMs ?? SETTLE_CHECK_MS)
    this.#timer.unref()
  }

  /** Run `hook` at every settle (it drops memory its owner can rebuild). */
  onRelease (hook: () => void): void {
    this.#hooks.push(hook)
  }

  /** Note work the activity counter does not see (an export that just ended): the next quiet period settles. */
  touch (): void {
    this.#dirty = true
    this.#quietSince = performance.now()
  }

  /**
   * Give the burst's memory back now. Async: V8 frees the backing stores of
   * dead ArrayBuffers on a background thread after the GC, so the trim waits
   * TRIM_DELAY_MS for those free()s to land. Never rejects (failures are logged).
   */
  async settle (): Promise<void> {
    this.#settling ??= this.#settle().finally(() => { this.#settling = undefined })
    await this.#settling
  }

  async #settle (): Promise<void> {
    const started = performance.now()
    const before = rssNow()
    for (const hook of this.#hooks) {
      try { hook() } catch (err) { this.#log(`memory: release hook failed: ${(err as Error).message}`, 'warn') }
    }
    if (this.#native !== undefined) {
      for (const file of this.#mappedFiles()) {
        try { this.#native.adviseMappedFile(file, 'unmap') } catch (err) { this.#log(`memory: cannot unmap ${file}: ${(err as Error).message}`, 'warn') }
      }
    }
    // Two full GCs: the second finds the first one's freed pages and gives V8's heap back (measured: 19.9 → 11.5 MB committed).
    this.#gc()
    this.#gc()
    await new Promise(resolve => setTimeout(resolve, TRIM_DELAY_MS).unref())
    this.#native?.mallocTrim()
    try { this.#native?.unmapCleanFilePages() } catch (err) { this.#log(`memory: cannot unmap the clean text pages: ${(err as Error).message}`, 'warn') }
    this.#dirty = false
    this.#quietSince = performance.now()
    const s = this.stats
    s.settles++
    s.lastSettleAt = new Date().toISOString()
    s.lastRssBeforeBytes = before
    s.lastRssAfterBytes = rssNow()
    s.lastSettleMs = performance.now() - started
  }

  /**
   * One full GC now, and malloc_trim(0) TRIM_DELAY_MS later: a burst's dead buffers go back without a settle's
   * other steps (the reclaimer calls it while over its target). Sync; the trim runs on a timer.
   */
  collect (): void {
    this.#gc()
    if (this.#native === undefined || this.#trimTimer !== undefined) return
    this.#trimTimer = setTimeout(() => { this.#trimTimer = undefined; this.#native?.mallocTrim() }, TRIM_DELAY_MS)
    this.#trimTimer.unref()
  }

  #check (): void {
    const count = this.#activity()
    const now = performance.now()
    if (count !== this.#lastCount) {
      this.#lastCount = count
      this.#dirty = true
      this.#quietSince = now
      return
    }
    if (now - this.#quietSince < this.#idleMs) return
    if (this.#settling !== undefined) return
    if (this.#dirty || rssNow() > (this.stats.lastRssAfterBytes ?? 0) + this.#regrowBytes) void this.settle()
  }

  /** Stop watching. Idempotent. */
  close (): void {
    clearInterval(this.#timer)
    clearTimeout(this.#trimTimer)
  }
}
