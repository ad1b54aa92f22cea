/** Disk use of a directory tree, as `du` counts it (allocated blocks), for `layerctl df`. */
import { lstat, readdir } from 'node:fs/promises'
import { join } from 'node:path'

/**
 * Bytes allocated under `dir` (st_blocks × 512), not crossing into other
 * filesystems (a sandbox's mounted upper is counted as its image file). A
 * missing directory is 0. Async.
 */
export async function diskUsage (dir: string): Promise<number> {
  let root
  try { root = await lstat(dir) } catch { return 0 }
  let total = 0
  const walk = async (path: string): Promise<void> => {
    let st
    try { st = await lstat(path) } catch { return }
    if (st.dev !== root.dev) return
    total += st.blocks * 512
    if (!st.isDirectory()) return
    let names: string[]
    try { names = await readdir(path) } catch { return }
    for (const name of names) await walk(join(path, name))
  }
  await walk(dir)
  return total
}
