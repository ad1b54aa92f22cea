/**
 * After a restart: the mounts the node database lists and the shared images
 * recorded belong to a daemon that died. Where the keeper kept a connection,
 * serve it again (a takeover: readers never notice); clean every other
 * mountpoint (a dead FUSE mount answers ENOTCONN) and, with `restore`, mount
 * it again. Shared images whose connections were not kept are cleaned and
 * mounted again on demand. The mounts are MountManager's (RecoveryHost).
 *
 * May import: src/fs/, src/host/mount-table.ts, src/state/ (types), src/holder/ (types), this folder.
 */
import { realpath } from 'node:fs/promises'
import { basename, join, resolve } from 'node:path'
import { lazyUnmount } from '../../fs/fuse-binding.js'
import type { HeldConnections } from '../../holder/connection-keeper.js'
import { mountsUnder } from '../../host/mount-table.js'
import type { MountTable } from '../../state/mount-table.js'
import type { MountInfo, SharedImage } from '../client/control-protocol.js'
import type { SharedImageRecords } from './shared-image-records.js'
import { storeLocationOf, type StoreLocation } from '../reading/store-pool.js'
import type { LogLine } from '../../log-line.js'

/** What recovery needs of one of the host's mounts. */
export interface RecoveredMount { info: MountInfo, mount: { adopted: boolean } }

/** What recovery uses of MountManager. */
export interface RecoveryHost {
  /** Keeps FUSE connections across daemon restarts; none: every mount died with the daemon. */
  keeper: Pick<HeldConnections, 'has'> | undefined
  /** Where shared images live (`<home>/images`). */
  sharedDir: string
  sharedRecords: SharedImageRecords
  /** The node database's mounts. */
  rows: Pick<MountTable, 'list' | 'remove'>
  /** The host's mount at `mountpoint`, if any. Sync. */
  mounted: (mountpoint: string) => RecoveredMount | undefined
  shared: (req: StoreLocation & { image: string }) => Promise<SharedImage>
  mount: (req: StoreLocation & { image: string, mountpoint: string }) => Promise<MountInfo>
  log: LogLine
}

/** Counts of what recovery did: stale mounts cleaned, mounts mounted again, connections taken over. */
export interface RecoveryResult { cleaned: number, restored: number, adopted: number }

/** Recover the host's mounts (module doc). Async; never throws, failures are logged. */
export async function recoverMounts (host: RecoveryHost, restore: boolean): Promise<RecoveryResult> {
  const keeper = restore ? host.keeper : undefined
  let adopted = 0
  const sharedDir = await realpath(host.sharedDir).catch(() => resolve(host.sharedDir))
  const kept = (path: string): boolean => keeper?.has(path) === true
  const keptImages = host.sharedRecords.list().filter(r => kept(r.topPath ?? r.mountpoint) && (r.basePath === undefined || kept(r.basePath)))
  const keepOverlays = new Set(keptImages.filter(r => r.topPath !== undefined).map(r => join(sharedDir, basename(r.mountpoint))))
  // Whatever is left below the shared directory that no kept connection serves is dead: detach it first.
  for (const left of await mountsUnder(host.sharedDir)) {
    if (kept(left) || keepOverlays.has(left)) continue
    await cleanStaleMount(host, left)
  }
  for (const r of host.sharedRecords.list()) {
    if (!keptImages.includes(r)) { host.sharedRecords.delete(r.mountpoint); continue }
    try {
      const before = performance.now()
      await host.shared({ image: r.manifest, ...storeLocationOf(r) })
      const m = host.mounted(r.mountpoint)
      if (m !== undefined) { m.info.image = r.image; host.sharedRecords.put({ ...host.sharedRecords.get(r.mountpoint)!, image: r.image }) }
      if (m?.mount.adopted === true) adopted++
      host.log(`image ${r.image} at ${r.mountpoint}: ${m?.mount.adopted === true ? 'taken over' : 'mounted again'} in ${Math.round(performance.now() - before)} ms`)
    } catch (err) {
      host.log(`serving image ${r.image} at ${r.mountpoint} again: ${(err as Error).message}`, 'warn')
    }
  }
  let restored = 0
  let cleaned = 0
  for (const row of host.rows.list()) {
    if (host.mounted(row.mountpoint) !== undefined) continue // a shared image, served above
    cleaned++
    host.rows.remove(row.mountpoint)
    if (!restore) {
      await cleanStaleMount(host, row.mountpoint)
      continue
    }
    try {
      // mountImage takes a kept connection over, or cleans the dead mount and mounts afresh.
      await host.mount({ image: row.manifest, mountpoint: row.mountpoint, ...storeLocationOf(row) })
      const m = host.mounted(resolve(row.mountpoint))!
      m.info.image = row.image
      if (m.mount.adopted) adopted++
      restored++
    } catch (err) {
      host.log(`restoring mount of ${row.image} at ${row.mountpoint}: ${(err as Error).message}`, 'warn')
    }
  }
  return { cleaned, restored, adopted }
}

/** Detach a dead mount at `path` (lazily: a reader still in it is not waited for). Async; never throws, a failure is logged. */
export async function cleanStaleMount (host: Pick<RecoveryHost, 'log'>, path: string): Promise<void> {
  try { await lazyUnmount(path) } catch (err) { host.log(`cleaning stale mount ${path}: ${(err as Error).message}`, 'warn') }
}
