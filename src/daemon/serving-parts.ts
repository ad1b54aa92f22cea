/**
 * The parts of the daemon that serve images: the node database, the chunk
 * cache, the store pool, the mounts and the memory upkeep around them
 * (settler, reclaimer, page-copy dropper). layerd-daemon.ts imports this
 * module only after its control socket listens (`import()`), so that the
 * socket answers before this code (most of the daemon's ~100 modules, and
 * the lmdb, msgpackr, better-sqlite3 and zstd addons) has loaded; requests
 * that need these parts wait for them (src/daemon/README.md, "Start").
 *
 * May import: everything below src/daemon, this folder.
 */
import { join } from 'node:path'
import { LmdbChunkCache } from '../cache/lmdb-chunk-cache.js'
import { isLmdbCommitEcho } from '../cache/lmdb-commit-failure.js'
import { openNodeDb, type NodeDb } from '../state/node-db.js'
import { expectRejections } from './control/process-guards.js'
import { MountManager, type MountOptions } from './mounts/mount-manager.js'
import { MemorySettler } from './memory/memory-settler.js'
import { MemoryReclaimer } from './memory/memory-reclaimer.js'
import { PageCopyDropper } from './memory/page-copies.js'
import { memoryGauge } from '../host/memory-pressure.js'
import { releaseReadBuffers } from '../fs/kernel-fuse.js'
import { StorePool } from './reading/store-pool.js'
import type { HeldConnections } from '../holder/connection-keeper.js'
import type { PreparedTakeovers } from './mounts/prepared-takeovers.js'
import type { LogLine } from '../log-line.js'
import { OVER_TARGET_DECODED_BYTES, OVER_TARGET_WRITE_BATCH } from './memory/upkeep-constants.js'


export interface ServingPartsConfig {
  home: string
  /** Cache cap in bytes; Infinity for none. */
  cacheBytes: number
  /** Reclaim above this memory use (bytes); 'default': half the limit where layerd is charged; null: off. */
  memoryTarget: number | 'default' | null
  /** How long a read retries an unavailable store before EIO (store-pool.ts). */
  storeDeadlineMs?: number
  mounts?: MountOptions
  keeper?: HeldConnections
  prepared?: PreparedTakeovers
  log: LogLine
  /** Called after each part opens, with its name (the daemon's start phases). */
  mark?: (phase: string) => void
}

/** The opened parts. `close()` closes what opened, in order; idempotent. */
export interface ServingParts {
  db: NodeDb
  cache: LmdbChunkCache
  stores: StorePool
  mounts: MountManager
  settler: MemorySettler
  reclaimer: MemoryReclaimer | undefined
  pageCopies: PageCopyDropper
  close: () => Promise<void>
}

/**
 * Open the node database and the cache under `config.home`, and build the
 * stores, mounts and memory upkeep on them. Sync; throws what the database
 * or the cache throws (closing what had opened).
 */
export function openServingParts (config: ServingPartsConfig): ServingParts {
  const { home, log } = config
  const mark = config.mark ?? (() => {})
  const db = openNodeDb(home)
  mark('db')
  let cache: LmdbChunkCache
  let reclaimer: MemoryReclaimer | undefined
  // layerd's own copies of image data leave the page cache while the reclaimer is over its target (page-copies.ts).
  const pageCopies = new PageCopyDropper({ active: () => reclaimer?.overTarget === true, cacheFile: join(home, 'cache', 'data.mdb'), log })
  try {
    expectRejections(isLmdbCommitEcho)
    cache = LmdbChunkCache.open(join(home, 'cache'), { capBytes: config.cacheBytes, log, afterCommit: pageCopies.afterCacheCommit })
  } catch (err) {
    db.close()
    throw err
  }
  mark('cache')
  const stores = new StorePool(cache, log, { afterRead: pageCopies.afterStoreRead, beforeRead: pageCopies.beforeStoreRead }, config.storeDeadlineMs)
  const mounts = new MountManager(db, cache, stores, log, join(home, 'images'), {
    ...config.mounts, sharedRecordsFile: join(home, 'shared-images.json'), ...(config.keeper === undefined ? {} : { keeper: config.keeper }), ...(config.prepared === undefined ? {} : { prepared: config.prepared })
  })
  const settler = new MemorySettler({
    activity: () => { const s = cache.stats(); return s.hits + s.misses },
    mappedFiles: () => [cache.mapFile],
    log
  })
  settler.onRelease(() => cache.releaseMemory())
  settler.onRelease(() => releaseReadBuffers())
  reclaimer = startReclaimer(config, cache, settler, pageCopies)
  let closing: Promise<void> | undefined
  const close = async (): Promise<void> => {
    closing ??= (async () => {
      settler.close()
      reclaimer?.close()
      await mounts.unmountAll()
      await stores.close()
      await cache.close()
      await pageCopies.idle() // a drop its last commits asked for: before the home's lock goes
      db.close()
    })()
    await closing
  }
  return { db, cache, stores, mounts, settler, reclaimer, pageCopies, close }
}

/**
 * What the chunk cache changes as use crosses the memory target either way
 * (MemoryReclaimerOptions.overTargetChanged): while over, the decoded-chunk
 * cap (OVER_TARGET_DECODED_BYTES) and the write batch
 * (OVER_TARGET_WRITE_BATCH) are at most the over-target ones; back under,
 * the cache's own again. Sync.
 */
export function overTargetCacheLimits (cache: Pick<LmdbChunkCache, 'decodedCacheBytes' | 'writeBatch'>): (over: boolean) => void {
  const decodedCacheBytes = cache.decodedCacheBytes
  const writeBatch = cache.writeBatch
  const over = {
    decodedCacheBytes: Math.min(decodedCacheBytes, OVER_TARGET_DECODED_BYTES),
    writeBatch: { delayMs: Math.min(writeBatch.delayMs, OVER_TARGET_WRITE_BATCH.delayMs), maxBytes: Math.min(writeBatch.maxBytes, OVER_TARGET_WRITE_BATCH.maxBytes) }
  }
  return isOver => {
    cache.decodedCacheBytes = isOver ? over.decodedCacheBytes : decodedCacheBytes
    cache.writeBatch = isOver ? over.writeBatch : writeBatch
  }
}

/** The reclaimer for config.memoryTarget (undefined when off). */
function startReclaimer (config: ServingPartsConfig, cache: LmdbChunkCache, settler: MemorySettler, pageCopies: PageCopyDropper): MemoryReclaimer | undefined {
  const target = config.memoryTarget
  if (target === null) return undefined
  const gauge = memoryGauge()
  const targetBytes = target === 'default' ? Math.floor(gauge.read().limitBytes / 2) : target
  config.log(`memory: reclaim above ${Math.round(targetBytes / 2 ** 20)} MiB (${gauge.source})`)
  return new MemoryReclaimer({
    gauge,
    targetBytes,
    settle: async () => { await settler.settle(); pageCopies.dropStoreReadahead() },
    collect: () => settler.collect(),
    activity: () => { const s = cache.stats(); return s.hits + s.misses },
    flushWrites: async () => await pageCopies.dropWrittenNow(),
    overTargetChanged: overTargetCacheLimits(cache),
    cacheFiles: () => [cache.mapFile],
    log: config.log
  })
}
