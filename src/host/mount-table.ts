/**
 * The host's mount table (/proc/self/mountinfo) as far as teardown needs it:
 * which mounts lie at or below a directory, and unmounting them all,
 * deepest first. Sandbox teardown and the daemon's recovery of its mount
 * directories are driven by the kernel's table rather than by what set-up
 * remembers, so they also clean up after a crashed process.
 *
 * May import: src/errors.ts, src/native.ts, node built-ins.
 */
import { readFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import { UnsupportedError } from '../errors.js'
import { MNT_DETACH, nativeMounts } from '../native.js'

/** mountinfo escapes space, tab, newline and backslash as \ooo. */
function unescapeMountPath (s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)))
}

/** Mount points at or below `dir` (absolute), deepest first, each once. Async. */
export async function mountsUnder (dir: string): Promise<string[]> {
  const root = resolve(dir)
  const text = await readFile('/proc/self/mountinfo', 'utf8')
  const found = new Set<string>()
  for (const line of text.split('\n')) {
    const mountPoint = line.split(' ')[4]
    if (mountPoint === undefined) continue
    const path = unescapeMountPath(mountPoint)
    if (path === root || path.startsWith(root + '/')) found.add(path)
  }
  return [...found].sort((a, b) => b.length - a.length)
}

/**
 * Unmount everything at or below `dir`, deepest first; a busy mount is
 * detached lazily (MNT_DETACH) so teardown never hangs on a stuck reader.
 * Loop devices set up to clear themselves (`mount -o loop`, mountLoop)
 * are released by the kernel on the last unmount. Idempotent. Async; throws UnsupportedError if
 * a mount is still present afterwards.
 */
export async function unmountAllUnder (dir: string): Promise<void> {
  for (let round = 0; round < 3; round++) {
    const mounts = await mountsUnder(dir)
    if (mounts.length === 0) return
    // umount2(2) from the addon: a spawn of umount(8) forks the caller.
    const sys = nativeMounts()
    for (const m of mounts) {
      try { sys.umount2(m, 0) } catch { try { sys.umount2(m, MNT_DETACH) } catch {} }
    }
  }
  const left = await mountsUnder(dir)
  if (left.length > 0) throw new UnsupportedError(`cannot unmount ${left.join(', ')} below ${dir}`)
}
