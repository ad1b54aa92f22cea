/**
 * Access traces: which chunks an image's sandboxes needed first, in order,
 * kept per manifest in the node database. `layerctl prefetch` warms the
 * traced chunks first (what the workload actually reads, in the order it
 * reads it), then the rest of the image — the idea behind Nydus's and
 * DADI's trace-based prefetch, without a separate build step.
 *
 * A trace is recorded from demand misses of one mount (at most
 * MAX_TRACE_CHUNKS) and saved when the mount ends; a newer trace replaces an
 * older one.
 *
 * May import: src/format/, src/state/.
 */
import type { ChunkRef } from '../../format/toc.js'
import type { NodeDb } from '../../state/node-db.js'
import { AccessTraceTable } from '../../state/access-trace-table.js'

export const MAX_TRACE_CHUNKS = 100_000

/** Collects a mount's demand misses in first-touch order. */
export class TraceRecorder {
  readonly #seen = new Set<string>()
  readonly refs: ChunkRef[] = []

  record (refs: readonly ChunkRef[]): void {
    for (const r of refs) {
      if (this.refs.length >= MAX_TRACE_CHUNKS) return
      if (this.#seen.has(r.digest)) continue
      this.#seen.add(r.digest)
      this.refs.push(r)
    }
  }
}

export class AccessTraces {
  readonly #table: AccessTraceTable

  constructor (db: NodeDb) {
    this.#table = new AccessTraceTable(db)
  }

  /** Replace the trace of `manifest` (no-op for an empty one). Sync, one transaction. */
  save (manifest: string, refs: readonly ChunkRef[]): void {
    if (refs.length === 0) return
    this.#table.replace(manifest, refs)
  }

  /** The trace of `manifest`, in first-touch order; empty when none was recorded. Sync. */
  load (manifest: string): ChunkRef[] {
    return this.#table.load(manifest)
  }
}

/** The traced chunks first, in trace order, then every other chunk of the image in blob order. */
export function prefetchOrder (trace: readonly ChunkRef[], all: readonly ChunkRef[]): ChunkRef[] {
  const traced = new Set(trace.map(r => r.digest))
  return [...trace, ...all.filter(r => !traced.has(r.digest))]
}
