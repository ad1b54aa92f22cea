/**
 * A mount's counters as `layerctl stats MOUNTPOINT` shows them: the FUSE
 * mount's own, its chunk reader's fetches, and the kernel backend's FUSE
 * requests by kind.
 *
 * May import: src/fs/ (types), this folder.
 */
import type { ImageMount } from '../../fs/image-mount.js'
import type { MountStats } from '../client/control-protocol.js'
import type { MountChunkReader } from '../reading/mount-chunk-reader.js'

/** What the counters are read from: a mount's name, its reader and its FUSE mount. */
export interface CountedMount {
  info: { mountpoint: string, image: string }
  reader: Pick<MountChunkReader, 'stats'>
  mount: Pick<ImageMount, 'stats' | 'serverCounters'>
}

/** The counters of `m` now. Sync. */
export function mountStatsOf (m: CountedMount): MountStats {
  const s = m.reader.stats
  const fuseOps = m.mount.serverCounters()
  return {
    mountpoint: m.info.mountpoint,
    image: m.info.image,
    ...m.mount.stats(),
    fetches: s.fetches,
    prefetchedChunks: s.prefetchedChunks,
    storeErrors: s.storeErrors,
    ...(fuseOps === undefined ? {} : { fuseOps })
  }
}
