/**
 * LayerdSnapshotter's own bookkeeping, without containerd: its real node
 * database, snapshot directories on disk, and the daemon's remote layers
 * over a real mount manager (never asked here: no Prepare carries a target).
 */
import t from 'tap'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { MemoryChunkCache } from '../cache/memory-chunk-cache.js'
import { MountManager } from '../daemon/mounts/mount-manager.js'
import { StorePool } from '../daemon/reading/store-pool.js'
import { ContainerdSnapshotTable } from '../state/containerd-snapshot-table.js'
import { ensureHomeDir, openNodeDb } from '../state/node-db.js'
import { DaemonRemoteLayers } from './daemon-remote-layers.js'
import { LayerdSnapshotter } from './layerd-snapshotter.js'

const home = await mkdtemp('/tmp/layerd-snap-')
t.teardown(async () => await rm(home, { recursive: true, force: true }))
ensureHomeDir(home)
const db = openNodeDb(home)
t.teardown(() => db.close())
const cache = new MemoryChunkCache({ maintenanceIntervalMs: 0 })
const stores = new StorePool(cache, () => {})
t.teardown(async () => await stores.close())
const mounts = new MountManager(db, cache, stores, () => {}, join(home, 'images'))
const records = new ContainerdSnapshotTable(db)
const snapshotter = new LayerdSnapshotter({
  root: join(home, 'snapshotter'),
  records,
  remote: new DaemonRemoteLayers(mounts, stores, { store: `file://${join(home, 'store')}` }, () => {}),
  log: () => {}
})

t.test('`LayerdSnapshotter.cleanup` removes directories without a snapshot, and keeps those of snapshots prepared while it runs', async t => {
  const orphans = [join(home, 'snapshotter', 'snapshots', '900001'), join(home, 'snapshotter', 'snapshots', '900002')]
  for (const dir of orphans) await mkdir(join(dir, 'fs'), { recursive: true })
  let removed = 0
  // containerd's GC calls Cleanup while containers start: each round prepares a snapshot while a cleanup lists the directories.
  for (let i = 0; i < 30; i++) {
    const cleaning = snapshotter.cleanup()
    const preparing = snapshotter.prepare(`default/${i}/c${i}`, '', {})
    const [c] = await Promise.all([cleaning, preparing])
    removed += c.removed
    const dir = snapshotter.dirOf(records.get(`default/${i}/c${i}`)!.id)
    t.ok(existsSync(join(dir, 'fs')) && existsSync(join(dir, 'work')), `round ${i}: the snapshot prepared during the cleanup keeps ${dir}`)
  }
  t.equal(removed, orphans.length, 'the orphan directories were removed, once')
  for (const dir of orphans) t.notOk(existsSync(dir), `${dir} is gone`)
  for (let i = 0; i < 30; i++) await snapshotter.remove(`default/${i}/c${i}`)
  t.same((await snapshotter.cleanup()).removed, 0, 'nothing left to clean once every snapshot is removed')
})
