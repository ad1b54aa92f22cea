/**
 * The containerd snapshotter as the daemon runs it: the snapshot table in
 * the node database, snapshots under `<home>/snapshotter/`, remote layers
 * from the daemon's store, and the gRPC service on
 * `<home>/snapshotter.sock` (containerd's `[proxy_plugins]` address). The
 * socket is bound at start; gRPC is loaded when containerd first connects.
 *
 * May import: src/daemon/ (mount manager, store pool, types), src/state/ (types), this folder.
 */
import { join } from 'node:path'
import { BadRequestError, UnsupportedError } from '../errors.js'
import type { ControlHandlers } from '../daemon/client/control-protocol.js'
import type { DaemonParts, DaemonService } from '../daemon/layerd-daemon.js'
import type { MountManager } from '../daemon/mounts/mount-manager.js'
import type { StoreLocation, StorePool } from '../daemon/reading/store-pool.js'
import type { NodeDb } from '../state/node-db.js'
import { DaemonRemoteLayers } from './daemon-remote-layers.js'
import { LayerdSnapshotter } from './layerd-snapshotter.js'
import { ContainerdSnapshotTable } from '../state/containerd-snapshot-table.js'
import { containerdApiRoot } from './containerd-api-root.js'
import { OnDemandSocket } from './on-demand-socket.js'

/** The proxy plugin's name in containerd's config, and so the `--snapshotter` value. */
import { snapshotterSocketPath } from './snapshotter-paths.js'
import type { LogLine } from '../log-line.js'
export { SNAPSHOTTER_NAME, snapshotterSocketPath } from './snapshotter-paths.js'

export interface ContainerdSnapshotterDeps {
  home: string
  db: NodeDb
  mounts: MountManager
  stores: StorePool
  /** The store remote snapshots are served from. */
  store: StoreLocation
  log: LogLine
}

/**
 * The daemon service (DaemonConfig.services) serving remote snapshots from
 * `store`, and the `containerdPull` control method (`layerctl containerd
 * pull` of a layerd image, run here: the store is open, containerd's protos
 * are loaded). Without containerd's protos installed it logs why, serves no
 * snapshots, and answers containerdPull with that reason. Async.
 */
export async function containerdSnapshotterService (parts: DaemonParts, store: StoreLocation): Promise<DaemonService> {
  try {
    const running = await startContainerdSnapshotter({ ...parts, store })
    parts.log(`containerd snapshotter serving ${snapshotterSocketPath(parts.home)} (remote snapshots from ${store.store})`)
    return { close: running.close, handlers: pullHandlers(parts.stores, running.preload, chainId => { running.snapshotter.warm(chainId) }) }
  } catch (err) {
    if (!(err instanceof UnsupportedError)) throw err
    parts.log(`containerd snapshotter not started: ${err.message}`, 'warn')
    const reason = err.message
    return { close: async () => {}, handlers: { containerdPull: async () => { throw new UnsupportedError(`containerdPull: this layerd's containerd snapshotter did not start: ${reason}`) } } }
  }
}

/** containerdPull, against the request's store (which must be the one remote snapshots come from, or the Prepares fail naming the layer). */
function pullHandlers (stores: StorePool, preload: () => Promise<void>, warm: (chainId: string) => void): Pick<ControlHandlers, 'containerdPull'> {
  return {
    containerdPull: async p => {
      if (p.image.startsWith('docker://')) throw new BadRequestError(`containerdPull ${p.image}: a docker:// image is pulled by layerctl itself (with the caller's registry credentials), not by layerd`)
      // Loaded on first use: an idle daemon holds none of the pull's code (issue 14).
      // The snapshots server loaded first, if containerd has not dialed it yet: its Prepares come back through it. (A
      // handshake containerd gave up on is retried by containerd-pull.ts's snapshotsCall.)
      const [{ containerdPull }] = await Promise.all([import('./containerd-pull.js'), preload()])
      return await containerdPull({
        image: p.image,
        store: stores.get(p).store,
        address: p.address,
        namespace: p.namespace,
        ...(p.name === undefined ? {} : { name: p.name }),
        onLayersPrepared: warm
      })
    }
  }
}

/**
 * Load containerd's snapshots protos now (a sync parse of about 200 ms), not
 * when the service starts: a daemon about to take over (a warm standby, a
 * planned restart's new one) does this while another daemon serves, so the
 * reads it takes over never wait behind it. Async; never rejects (without the
 * protos the service's start says why). A daemon that takes nothing over does
 * not call it (layerd-daemon.ts).
 */
export async function preloadContainerdSnapshotter (): Promise<void> {
  // Imported here, not at the top: a daemon that takes nothing over loads gRPC only when containerd first dials.
  const [{ containerdService }] = await Promise.all([import('./containerd-protos.js'), import('./snapshots-grpc-server.js')])
  try { containerdService('snapshots') } catch (err) { if (!(err instanceof UnsupportedError)) throw err }
}

export interface RunningSnapshotter {
  snapshotter: LayerdSnapshotter
  /** Load the gRPC service now, before containerd first dials (OnDemandSocket.preload). Async; never rejects. */
  preload: () => Promise<void>
  close: () => Promise<void>
}

/** Open the snapshotter, remount what active snapshots stand on, and serve. Async; throws UnsupportedError without containerd's protos. */
export async function startContainerdSnapshotter (d: ContainerdSnapshotterDeps): Promise<RunningSnapshotter> {
  const snapshotter = new LayerdSnapshotter({
    root: join(d.home, 'snapshotter'),
    records: new ContainerdSnapshotTable(d.db),
    remote: new DaemonRemoteLayers(d.mounts, d.stores, d.store, d.log),
    log: d.log
  })
  // Whether containerd's protos are there is known now; gRPC itself is loaded when containerd first dials (on-demand-socket.ts).
  containerdApiRoot()
  const remounted = await snapshotter.recover()
  if (remounted > 0) d.log(`snapshotter: ${remounted} remote snapshot(s) mounted again for their active snapshots`)
  const socket = new OnDemandSocket(snapshotterSocketPath(d.home), async () => {
    const { SnapshotsGrpcServer } = await import('./snapshots-grpc-server.js')
    return new SnapshotsGrpcServer(snapshotter, d.log)
  }, d.log)
  await socket.listen()
  return { snapshotter, preload: async () => { await socket.preload() }, close: async () => { await socket.close() } }
}
