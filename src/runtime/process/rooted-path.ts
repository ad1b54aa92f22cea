/**
 * Resolve a path inside an image root the way the sandbox would see it —
 * symlinks followed, but always relative to the root, like chroot — so the
 * host never follows an image's `/etc -> /host/secret` link out of the
 * image. Used on the immutable lower (user lookup) and on the merged root
 * before any sandbox process runs (creating the working directory), where
 * nothing can change the tree between the checks and the use.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { lstat, mkdir, readFile, readlink } from 'node:fs/promises'
import { join } from 'node:path'
import { BadInputError } from '../../errors.js'

const MAX_SYMLINK_HOPS = 40

/**
 * The host path that `path` (absolute, as seen inside) names under `root`,
 * and whether it exists. Missing components end the walk (the rest is
 * appended as is). Async. Throws BadInputError on a symlink loop.
 */
export async function resolveInRoot (root: string, path: string): Promise<{ hostPath: string, exists: boolean }> {
  const done: string[] = []
  const todo = path.split('/').filter(c => c !== '' && c !== '.').reverse()
  let hops = 0
  while (todo.length > 0) {
    const comp = todo.pop()!
    if (comp === '..') { done.pop(); continue }
    const candidate = join(root, ...done, comp)
    const st = await lstat(candidate).catch(() => undefined)
    if (st === undefined) {
      return { hostPath: join(root, ...done, comp, ...todo.reverse()), exists: false }
    }
    if (!st.isSymbolicLink()) { done.push(comp); continue }
    if (++hops > MAX_SYMLINK_HOPS) throw new BadInputError(`${path} in image root ${root}: too many levels of symbolic links`)
    const target = await readlink(candidate)
    if (target.startsWith('/')) done.length = 0
    for (const c of target.split('/').filter(c => c !== '' && c !== '.').reverse()) todo.push(c)
  }
  return { hostPath: join(root, ...done), exists: true }
}

/**
 * Read a small regular file inside `root` (resolved with
 * {@link resolveInRoot}); undefined when it is missing or not a regular
 * file. Async. Throws BadInputError when it is larger than `maxBytes`.
 */
export async function readFileInRoot (root: string, path: string, maxBytes: number): Promise<string | undefined> {
  const { hostPath, exists } = await resolveInRoot(root, path)
  if (!exists) return undefined
  const st = await lstat(hostPath)
  if (!st.isFile()) return undefined
  if (st.size > maxBytes) throw new BadInputError(`${path} in image root ${root} is ${st.size} bytes, over the ${maxBytes}-byte limit`)
  return await readFile(hostPath, 'utf8')
}

/**
 * Create directory `path` (absolute, as seen inside) under `root` with its
 * missing parents, mode 0755, owned by the caller (root). Only safe while
 * no sandbox process can change the tree. Async. Throws BadInputError when
 * a component exists and is not a directory.
 */
export async function mkdirInRoot (root: string, path: string): Promise<void> {
  const { hostPath, exists } = await resolveInRoot(root, path)
  if (exists) {
    if (!(await lstat(hostPath)).isDirectory()) throw new BadInputError(`${path} in image root ${root} exists and is not a directory`)
    return
  }
  // Everything up to the first missing component was resolved inside the root; below it nothing exists yet.
  await mkdir(hostPath, { recursive: true, mode: 0o755 })
}
