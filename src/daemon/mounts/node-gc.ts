/**
 * `layerctl gc node`, the daemon's half: node state that nothing needs any
 * more. It runs inside the daemon, which owns the cache and knows its
 * mounts, so nothing a live mount uses can be taken:
 * - access traces whose manifest is gone from the store (a trace is only a
 *   prefetch hint for that manifest);
 * - directories under `<home>/images` with nothing mounted on or under
 *   them (left by a daemon that died while it mounted or unmounted), and
 *   not touched for DIR_GRACE_MS (a mount in progress makes its directory
 *   before the FUSE mount exists);
 * - cached TOCs and manifests that no mount pins (images no longer on the
 *   node: a later mount reads them from the store again).
 * Dead sandboxes are the CLI's half (src/runtime, which the daemon does not
 * know).
 *
 * May import: src/format/, src/store/ (types), src/cache/ (types), src/state/, src/host/.
 */
import { readdir, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import type { ChunkCache } from '../../cache/chunk-cache.js'
import { digestHex, isDigest } from '../../format/digest.js'
import { manifestKey } from '../../format/keys.js'
import { mountsUnder } from '../../host/mount-table.js'
import { AccessTraceTable } from '../../state/access-trace-table.js'
import type { NodeDb } from '../../state/node-db.js'
import type { ObjectStore } from '../../store/object-store.js'
import type { NodeGcResult } from '../client/control-protocol.js'
import type { LogLine } from '../../log-line.js'

/** A directory under `<home>/images` younger than this is left alone: a mount may be on its way. */
export const DIR_GRACE_MS = 60_000

export interface NodeGcParts {
  db: NodeDb
  cache: Pick<ChunkCache, 'dropUnpinnedMeta'>
  store: Pick<ObjectStore, 'stat'>
  /** Manifests mounted now: their traces are kept whatever the store says. */
  liveManifests: Set<string>
  sharedDir: string
  /** Default DIR_GRACE_MS. */
  dirGraceMs?: number
  log: LogLine
}

/** Collect the node's stale state (nothing, with `dryRun`, but the same report). Async. */
export async function collectNode (parts: NodeGcParts, options: { dryRun?: boolean } = {}): Promise<NodeGcResult> {
  const dryRun = options.dryRun === true
  const traces = new AccessTraceTable(parts.db)
  const removedTraces: string[] = []
  let kept = 0
  for (const manifest of traces.manifests()) {
    const stale = isDigest(manifest) && !parts.liveManifests.has(manifest) && (await parts.store.stat(manifestKey(digestHex(manifest)))) === undefined
    if (!stale) { kept++; continue }
    removedTraces.push(manifest)
    if (!dryRun) traces.delete(manifest)
  }
  const removedDirs: string[] = []
  const entries = await readdir(parts.sharedDir, { withFileTypes: true }).catch(() => [])
  for (const e of entries) {
    if (!e.isDirectory()) continue
    const dir = join(parts.sharedDir, e.name)
    if ((await mountsUnder(dir)).length > 0) continue
    const st = await stat(dir).catch(() => undefined)
    if (st === undefined || Date.now() - st.mtimeMs < (parts.dirGraceMs ?? DIR_GRACE_MS)) continue
    removedDirs.push(dir)
    if (!dryRun) await rm(dir, { recursive: true, force: true })
  }
  const metadata = await parts.cache.dropUnpinnedMeta({ dryRun })
  parts.log(`gc node${dryRun ? ' (dry run)' : ''}: ${removedTraces.length} stale trace(s), ${removedDirs.length} mount dir(s), ${metadata.objects} cached metadata object(s) (${metadata.bytes} bytes)`)
  return { dryRun, traces: { removed: removedTraces, kept }, mountDirs: { removed: removedDirs }, metadata }
}
