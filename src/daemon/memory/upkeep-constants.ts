/**
 * Every tuning constant of layerd's memory upkeep, in one place, each with
 * the reason for its value. The settler gives a burst's memory back when the
 * daemon goes quiet; the reclaimer keeps the node under its memory target;
 * the page-copy dropper removes the page cache that layerd's own writes and
 * store reads leave. Figures are from `bench/node-memory.ts --sandboxes 16
 * --concurrency 4 --hold-ms 2000 --reps 3` (bench/README.md, "node-memory")
 * unless a line says otherwise. Options of the same names override them
 * (tests do).
 *
 * May import: nothing.
 */

const MIB = 1024 * 1024

/* ---- MemorySettler: giving memory back after a burst ---- */

/** Quiet after a burst before its memory is given back. Long enough that a sandbox's next reads rarely find the decoded chunks gone. */
export const SETTLE_IDLE_MS = 1500
/** How often the settler looks at its activity counter. */
export const SETTLE_CHECK_MS = 500
/** RSS growth since the last settle that settles again while quiet: below it, a settle's GC costs more than it returns. */
export const SETTLE_REGROW_BYTES = 8 * MIB
/** V8 frees dead ArrayBuffers' memory on a background thread after a GC; malloc_trim waits this long so it finds that memory free. */
export const TRIM_DELAY_MS = 200

/* ---- MemoryReclaimer: keeping the node under its target ---- */

/** How often the memory gauge (cgroup or MemAvailable) is read. */
export const RECLAIM_INTERVAL_MS = 250
/** A pass settles the daemon at most this often. */
export const RECLAIM_SETTLE_EVERY_MS = 2000
/** Image files not read for this long lose their page cache in a pass under a stall: 5 s cost 2.3x the page-cache misses. */
export const RECLAIM_COLD_MS = 30_000
/** PSI `some avg10` (percent) that counts as pressure even under the target. */
export const RECLAIM_PSI_THRESHOLD = 1
/** Over the target, a full GC runs each time layerd's anonymous memory grew this much over its low point: 2 MiB gave node peak −40.0% against −37.7% for 4 MiB, and 8 MiB left layerd ~14 MB above its floor at the peak. */
export const COLLECT_GROWTH_BYTES = 2 * MIB
/** How often that growth is looked at while over the target. */
export const COLLECT_CHECK_MS = 50
/** Chunk reads that make a burst: a cold wave makes ~19,000, a warm sandbox a few dozen. */
export const BURST_MIN_READS = 256
/** Stillness of the chunk reads that ends a burst. */
export const BURST_QUIET_MS = 250
/** A burst's settle comes at least this long after the last burst's settle: settling every 1 s of a wave cost +59% time. */
export const BURST_SETTLE_GAP_MS = 1000

/* ---- PageCopyDropper and the chunk cache while over the target ---- */

/** Wait after a chunk-cache commit before its pages are flushed and dropped: 250 ms against 500 ms is part of the −40.0% above, at −1.2% time. */
export const PAGE_DROP_DELAY_MS = 250
/** The decoded-chunk cache's cap while over the target (16 MiB otherwise). */
export const OVER_TARGET_DECODED_BYTES = 4 * MIB
/** New cache entries go to lmdb after this long or this many bytes while over the target (250 ms / 16 MiB otherwise): the open batch is anonymous memory, and at 250 ms it reached 12.5 MB during a cold wave (~27 MB/s of frames). */
export const OVER_TARGET_WRITE_BATCH = { delayMs: 50, maxBytes: 2 * MIB } as const
