/**
 * The command line of layerd-wall (native/layerd_wall.c), the first program
 * inside a Linux-tier sandbox, and what it needs from the tier:
 *
 * - It is executed through `/proc/self/fd/N`, an fd of its file that the
 *   runtime passes in (bwrap inherits it, runc preserves it): no host path
 *   is bound into the sandbox, and the image's libc does not matter (static).
 * - Landlock's writable places: every top-level directory of the sandbox's
 *   root (the sandbox's own layer) but /proc and /sys, and /dev (device
 *   nodes, /dev/shm, /dev/pts, /dev/mqueue). The root directory itself stays
 *   unwritable (a new top-level entry is refused), as do /proc and /sys.
 *
 * May import: src/native.ts, node built-ins.
 */
import { openSync } from 'node:fs'
import { readdir } from 'node:fs/promises'
import { layerdWallPath } from '../../native.js'

const NOT_WRITABLE_TOP = new Set(['proc', 'sys', 'dev'])
let wallFd: number | undefined

/** An fd of the layerd-wall executable, opened once per process (close-on-exec; the runtimes dup it in). Sync. */
export function wallExecutableFd (): number {
  wallFd ??= openSync(layerdWallPath(), 'r')
  return wallFd
}

/** The directories Landlock lets a sandbox write beneath, as seen inside it. Async; reads the root's top level. */
export async function landlockWritableDirs (root: string): Promise<string[]> {
  const entries = await readdir(root, { withFileTypes: true })
  const top = entries.filter(e => (e.isDirectory() || e.isSymbolicLink()) && !NOT_WRITABLE_TOP.has(e.name)).map(e => `/${e.name}`)
  return [...top.sort(), '/dev']
}

export interface WallCommand {
  /** The fd number the executable has inside (as the runtime passes it). */
  exeFd: number
  /** Where the BPF program and the notification socket are, inside; both or neither. */
  seccomp?: { programFd: number, notifyFd: number }
  /** Landlock's writable directories; none: no Landlock. */
  landlockDirs?: string[]
}

/** `/proc/self/fd/N …options… --`, to put before the command. Pure. */
export function wallPrefix (c: WallCommand): string[] {
  const argv = [`/proc/self/fd/${c.exeFd}`, '--close-fd', String(c.exeFd)]
  if (c.landlockDirs !== undefined) {
    argv.push('--landlock')
    for (const d of c.landlockDirs) argv.push('--rw', d)
  }
  if (c.seccomp !== undefined) argv.push('--seccomp-fd', String(c.seccomp.programFd), '--notify-fd', String(c.seccomp.notifyFd))
  argv.push('--')
  return argv
}
