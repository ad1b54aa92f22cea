/**
 * RemoteLayers for the daemon: layers found in the snapshotter's store
 * (layer-lookup.ts), checked against the chain ID containerd asked for,
 * and mounted through the daemon's MountManager (lazy FUSE, the node's
 * shared chunk cache; listed by `layerctl mounts`, counted in stats).
 *
 * May import: src/errors.ts, src/format/, src/fs/fuse-binding.ts, src/host/mount-table.ts,
 * src/daemon/ (mount manager, store pool), this folder.
 */
import type { Digest } from '../format/digest.js'
import type { MountManager } from '../daemon/mounts/mount-manager.js'
import type { StoreLocation, StorePool } from '../daemon/reading/store-pool.js'
import { lazyUnmount } from '../fs/fuse-binding.js'
import { mountsUnder } from '../host/mount-table.js'
import { chainIdOf } from './chain-id.js'
import { TARGET_SNAPSHOT_REF_LABEL, type RemoteLayers, type SnapshotUsage } from './layerd-snapshotter.js'
import { findLayerForLabels } from './layer-lookup.js'
import type { RemoteChain, SnapshotRecord } from '../state/containerd-snapshot-table.js'
import type { LogLine } from '../log-line.js'

export class DaemonRemoteLayers implements RemoteLayers {
  constructor (
    private readonly mounts: MountManager,
    private readonly stores: StorePool,
    private readonly store: StoreLocation,
    private readonly log: LogLine
  ) {}

  async resolve (labels: Record<string, string>, parent: SnapshotRecord | undefined): Promise<RemoteChain | undefined> {
    const target = labels[TARGET_SNAPSHOT_REF_LABEL]
    if (target === undefined) return undefined
    if (parent?.remote !== undefined && parent.remote.store !== this.store.store) return undefined
    const { store } = this.stores.get(this.store)
    const found = await findLayerForLabels(store, labels, async d => await this.mounts.layerToc(this.store, d))
    if (found === undefined) return undefined
    const parentChain = parent?.labels[TARGET_SNAPSHOT_REF_LABEL] as Digest | undefined
    const expected = chainIdOf(parentChain, found.toc.diffId as Digest)
    if (expected !== target) {
      this.log(`remote snapshot ${target}: layer ${found.digest} (found by ${found.via}) has diff_id ${found.toc.diffId}, which makes chain ${expected}: not served remotely`, 'warn')
      return undefined
    }
    return { ...this.store, layers: [...(parent?.remote?.layers ?? []), found.digest] }
  }

  async mount (chain: RemoteChain, mountpoint: string): Promise<string[]> {
    const m = await this.mounts.mountLayerChain({ store: chain.store, ...(chain.s3Endpoint === undefined ? {} : { s3Endpoint: chain.s3Endpoint }), mountpoint, name: `containerd layer ${chain.layers.at(-1)!}`, layers: chain.layers })
    return m.lowerDirs
  }

  async layerUsage (chain: RemoteChain): Promise<SnapshotUsage> {
    const toc = await this.mounts.layerToc({ store: chain.store, ...(chain.s3Endpoint === undefined ? {} : { s3Endpoint: chain.s3Endpoint }) }, chain.layers.at(-1)!)
    let size = 0
    for (const e of toc.entries) if (e.type === 'file') size += e.size
    return { size, inodes: toc.entries.length }
  }

  lowerDirs (mountpoint: string): string[] | undefined {
    return this.mounts.layerChainLowerDirs(mountpoint)
  }

  async unmount (mountpoint: string): Promise<void> {
    if (this.lowerDirs(mountpoint) !== undefined) {
      await this.mounts.unmount(mountpoint)
      return
    }
    // A mount an earlier daemon left that the holder still keeps alive (containers read it): mount() takes it over.
    if (await this.mounts.hasKeptConnection(mountpoint)) return
    await detachIfMounted(mountpoint)
  }
}

/** Detach a stale mount (a dead FUSE mount of an earlier daemon) at `mountpoint`, if the mount table lists one. Async; never throws. */
async function detachIfMounted (mountpoint: string): Promise<void> {
  for (const m of await mountsUnder(mountpoint).catch(() => [] as string[])) {
    if (m === mountpoint) await lazyUnmount(m).catch(() => {})
  }
}
