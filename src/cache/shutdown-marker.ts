/**
 * The cache directory's shutdown marker: was the cache closed cleanly, and
 * if not, can its file still be trusted?
 *
 * A cache that writes without fsync (lmdb `noSync`) stays consistent as
 * long as the kernel keeps its page cache: a killed process loses nothing
 * it committed, because every committed page reached the page cache before
 * lmdb wrote the meta page that points at it, and the page cache is what
 * the next open reads. What it does not survive is the machine going down
 * (power loss, kernel crash) before writeback: pages then reach the disk in
 * any order, and a meta page may point at pages that never arrived —
 * possibly wrong bytes under a chunk's key.
 *
 * So the marker records, before the first unsynced write, that the cache is
 * open, by whom, in which boot (/proc/sys/kernel/random/boot_id) and
 * whether it skips fsync; a clean close syncs the file, then records
 * `closed`. On open, a marker still saying `open` for an fsync-less writer
 * means the file is trusted only if the machine has not rebooted since;
 * otherwise (or if the writer's final sync failed) the caller must discard
 * the file. Caches written with fsync never need discarding: lmdb's own
 * commit protocol keeps them consistent.
 *
 * The marker is written with fsync (file and directory), so it is never
 * behind the data it describes.
 *
 * May import: node built-ins.
 */
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export const MARKER_FILE = 'shutdown.json'
const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id'

export interface ShutdownMarker {
  state: 'open' | 'closed'
  /** The writer skipped fsync. */
  noSync: boolean
  /** Boot the writer ran in ('' when unknown). */
  bootId: string
  pid: number
  /** The final sync at close failed (a writeback error): the file cannot be trusted. */
  syncFailed?: boolean
}

/** This boot's id, or '' where the kernel does not expose one. Sync. */
export function currentBootId (): string {
  try { return readFileSync(BOOT_ID_FILE, 'utf8').trim() } catch { return '' }
}

/** The marker in `dir`, or undefined when there is none or it is unreadable. Sync. */
export function readMarker (dir: string): ShutdownMarker | undefined {
  try {
    const m = JSON.parse(readFileSync(join(dir, MARKER_FILE), 'utf8')) as Partial<ShutdownMarker>
    if ((m.state !== 'open' && m.state !== 'closed') || typeof m.noSync !== 'boolean' || typeof m.bootId !== 'string') return undefined
    return m as ShutdownMarker
  } catch {
    return undefined
  }
}

/**
 * Why the data left by the writer that `marker` describes must be
 * discarded, or undefined when it can be trusted. Pure.
 * No marker: a cache from before markers, always written with fsync.
 */
export function distrustReason (marker: ShutdownMarker | undefined, bootId: string): string | undefined {
  if (marker === undefined || marker.state === 'closed' && marker.syncFailed !== true) return undefined
  if (marker.syncFailed === true) return 'its last sync to disk failed'
  if (!marker.noSync) return undefined
  if (bootId === '' || marker.bootId === '') return `it was not closed cleanly (pid ${marker.pid}) and this kernel does not say whether it rebooted since`
  if (marker.bootId !== bootId) return `the machine went down while it was open without fsync (pid ${marker.pid}, boot ${marker.bootId})`
  return undefined
}

/** Record `marker` in `dir`, durably (write, fsync, rename, fsync the directory). Sync; throws the fs error. */
export function writeMarker (dir: string, marker: ShutdownMarker): void {
  const tmp = join(dir, `${MARKER_FILE}.tmp`)
  writeFileSync(tmp, JSON.stringify(marker) + '\n', { mode: 0o600 })
  fsyncPath(tmp)
  renameSync(tmp, join(dir, MARKER_FILE))
  fsyncPath(dir)
}

/** fsync a file or directory by path. Sync; throws the fs error (EIO for a failed writeback). */
export function fsyncPath (path: string): void {
  const fd = openSync(path, 'r')
  try { fsyncSync(fd) } finally { closeSync(fd) }
}
