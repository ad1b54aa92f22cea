/**
 * Opening and closing the chunk cache's lmdb environment under its shutdown
 * marker (shutdown-marker.ts; src/cache/README.md, "Durability").
 *
 * With `noSync` lmdb never fsyncs: the file survives a killed process, not
 * the machine going down. So the marker says "open" before the first write
 * that skips fsync, an open that finds the marker of an fsync-less writer
 * from an earlier boot discards the file before lmdb reads it, and a clean
 * close syncs the file and then says "closed".
 *
 * May import: ./shutdown-marker.ts, lmdb, node built-ins.
 */
import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { open, type RootDatabase } from 'lmdb'
import { currentBootId, distrustReason, fsyncPath, readMarker, writeMarker } from './shutdown-marker.js'
import type { LogLine } from '../log-line.js'

const LMDB_FILES = ['data.mdb', 'lock.mdb']

export interface CacheEnvironmentOptions {
  /** The cache directory (created, mode 0700). */
  dir: string
  /** Never fsync (the marker guards it). */
  noSync: boolean
  /** Address space reserved for the map. */
  mapSizeBytes: number
  log: LogLine
}

/**
 * The lmdb environment in `dir`, its marker saying "open". A cache left open
 * without fsync by a writer from an earlier boot is discarded first (logged).
 * Sync. Throws what mkdir, the marker's write or lmdb's open throw (the
 * caller names the cache).
 */
export function openCacheEnvironment ({ dir, noSync, mapSizeBytes, log }: CacheEnvironmentOptions): RootDatabase {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const bootId = currentBootId()
  const previous = readMarker(dir)
  const distrust = distrustReason(previous, bootId)
  if (distrust !== undefined) {
    log(`chunk cache ${dir}: discarding its contents: ${distrust}`, 'warn')
    for (const f of LMDB_FILES) rmSync(join(dir, f), { force: true })
  }
  // Before the first write that skips fsync: the marker must never be behind the data. A daemon taking over from
  // one that died or handed over in this boot finds it saying so already (durably; only its pid, for messages,
  // names that earlier writer): no rewrite, so no two fsyncs while the taken-over mounts wait (issue 19).
  const alreadyOpen = distrust === undefined && previous?.state === 'open' && previous.syncFailed !== true &&
    previous.noSync === noSync && bootId !== '' && previous.bootId === bootId
  if (!alreadyOpen) writeMarker(dir, { state: 'open', noSync, bootId, pid: process.pid })
  // noReadAhead (MADV_RANDOM on the map): a hit reads one value, and with the disk's readahead (8 MiB on this host's
  // disk) one fault on a dropped page read megabytes around it, on the event loop (issue 14: bench/node-memory.ts).
  // (lmdb-js reads noReadAhead, open.js's MDB_NORDAHEAD flag, but its typings leave it out.)
  const options = { path: dir, noSubdir: false, mapSize: mapSizeBytes, maxDbs: 8, noSync, noMemInit: true, noReadAhead: true }
  return open(options)
}

/**
 * Close `env` and record a clean close: with noSync, the file is synced
 * first, and a failed sync is recorded so that the next open discards the
 * cache. Async; never rejects for the sync or the marker (both logged).
 */
export async function closeCacheEnvironment (env: RootDatabase, { dir, noSync, log }: Omit<CacheEnvironmentOptions, 'mapSizeBytes'>): Promise<void> {
  await env.close()
  let syncFailed = false
  if (noSync) {
    // lmdb never synced: make the file durable before calling it closed.
    try { fsyncPath(join(dir, 'data.mdb')) } catch (err) {
      syncFailed = true
      log(`chunk cache ${dir}: final sync failed, the cache will be discarded on next open: ${(err as Error).message}`, 'warn')
    }
  }
  try {
    writeMarker(dir, { state: 'closed', noSync, bootId: currentBootId(), pid: process.pid, syncFailed })
  } catch (err) {
    log(`chunk cache ${dir}: cannot record a clean close: ${(err as Error).message}`, 'warn')
  }
}
