/**
 * The containerd snapshotter as the daemon runs it: the snapshot table in
 * the node database, snapshots under `<home>/snapshotter/`, remote layers
 * from the daemon's store, and the gRPC service on
 * `<home>/snapshotter.sock` (containerd's `[proxy_plugins]` address).
 *
 * May import: src/daemon/ (mount manager, store pool, types), src/state/ (types), this folder.
 */
import { join } from 'node:path'
import { UnsupportedError } from '../errors.js'
import type { DaemonParts, DaemonService } from '../daemon/layerd-daemon.js'
import type { MountManager } from '../daemon/mount-manager.js'
import type { StoreLocation, StorePool } from '../daemon/store-pool.js'
import type { NodeDb } from '../state/node-db.js'
import { DaemonRemoteLayers } from './daemon-remote-layers.js'
import { LayerdSnapshotter } from './layerd-snapshotter.js'
import { ContainerdSnapshotTable } from '../state/containerd-snapshot-table.js'
import { SnapshotsGrpcServer } from './snapshots-grpc-server.js'
import { containerdService } from './containerd-protos.js'

/** The proxy plugin's name in containerd's config, and so the `--snapshotter` value. */
import { snapshotterSocketPath } from './snapshotter-paths.js'
export { SNAPSHOTTER_NAME, snapshotterSocketPath } from './snapshotter-paths.js'

export interface ContainerdSnapshotterDeps {
  home: string
  db: NodeDb
  mounts: MountManager
  stores: StorePool
  /** The store remote snapshots are served from. */
  store: StoreLocation
  log: (line: string) => void
}

/** The daemon service (DaemonConfig.services) serving remote snapshots from `store`; without containerd's protos installed it logs why and serves nothing. Async. */
export async function containerdSnapshotterService (parts: DaemonParts, store: StoreLocation): Promise<DaemonService> {
  try {
    const running = await startContainerdSnapshotter({ ...parts, store })
    parts.log(`containerd snapshotter serving ${snapshotterSocketPath(parts.home)} (remote snapshots from ${store.store})`)
    return running
  } catch (err) {
    if (!(err instanceof UnsupportedError)) throw err
    parts.log(`containerd snapshotter not started: ${err.message}`)
    return { close: async () => {} }
  }
}

/**
 * Load containerd's snapshots protos now (a sync parse of about 200 ms), not
 * when the service starts: a daemon about to take over (a warm standby, a
 * planned restart's new one) does this while another daemon serves, so the
 * reads it takes over never wait behind it. Sync; never throws (without the
 * protos the service's start says why).
 */
export function preloadContainerdSnapshotter (): void {
  try { containerdService('snapshots') } catch (err) { if (!(err instanceof UnsupportedError)) throw err }
}

export interface RunningSnapshotter { snapshotter: LayerdSnapshotter, close: () => Promise<void> }

/** Open the snapshotter, remount what active snapshots stand on, and serve. Async; throws UnsupportedError without containerd's protos. */
export async function startContainerdSnapshotter (d: ContainerdSnapshotterDeps): Promise<RunningSnapshotter> {
  const snapshotter = new LayerdSnapshotter({
    root: join(d.home, 'snapshotter'),
    records: new ContainerdSnapshotTable(d.db),
    remote: new DaemonRemoteLayers(d.mounts, d.stores, d.store, d.log),
    log: d.log
  })
  const server = new SnapshotsGrpcServer(snapshotter, d.log)
  const remounted = await snapshotter.recover()
  if (remounted > 0) d.log(`snapshotter: ${remounted} remote snapshot(s) mounted again for their active snapshots`)
  await server.listen(snapshotterSocketPath(d.home))
  return { snapshotter, close: async () => { await server.close() } }
}
