/**
 * A sandbox's cgroup on this host's cgroup v1 hierarchies (pids and memory;
 * the v2 mount here carries only hugetlb): `<controller>/<parent>/<id>`,
 * with `pids.max` and `memory.limit_in_bytes` set. A command joins it
 * before it execs the runtime (see `joinCgroupArgv`), so everything it
 * forks is counted and limited from the first instruction.
 *
 * `killAll` SIGKILLs every process in the group until none is left (a fork
 * bomb is bounded by pids.max, so this converges); `remove` kills and
 * removes the directories. Both idempotent.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { access, mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { UnsupportedError } from '../../errors.js'

export const CGROUP_V1_ROOT = '/sys/fs/cgroup'
const CONTROLLERS = ['pids', 'memory'] as const
const KILL_ROUNDS = 200
const KILL_ROUND_PAUSE_MS = 5

const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

/** Why cgroup v1 pids/memory cannot be used here, or undefined. Async. */
export async function cgroupUnavailableReason (root = CGROUP_V1_ROOT): Promise<string | undefined> {
  for (const c of CONTROLLERS) {
    const ok = await access(join(root, c, 'cgroup.procs')).then(() => true, () => false)
    if (!ok) return `cgroup v1 ${c} controller is not mounted at ${join(root, c)}`
  }
  return undefined
}

export interface CgroupLimits { pids: number, memoryBytes: number }

export class SandboxCgroup {
  /** Directories, one per controller. */
  readonly dirs: readonly string[]
  readonly #root: string
  /** `<parent>/<name>`, the group's path inside every hierarchy. */
  readonly #relative: string

  private constructor (dirs: string[], root: string, relative: string) {
    this.dirs = dirs
    this.#root = root
    this.#relative = relative
  }

  /** The group's path inside each hierarchy, e.g. for an OCI `cgroupsPath` below it. */
  get path (): string { return `/${this.#relative}` }

  /**
   * Create (or adopt) `<controller>/<parent>/<name>` and set the limits.
   * Async. Throws UnsupportedError when a controller is missing or a write
   * is refused.
   */
  static async create (name: string, limits: CgroupLimits, parent = 'layerd', root = CGROUP_V1_ROOT): Promise<SandboxCgroup> {
    const why = await cgroupUnavailableReason(root)
    if (why !== undefined) throw new UnsupportedError(why)
    const dirs = CONTROLLERS.map(c => join(root, c, parent, name))
    try {
      for (const d of dirs) await mkdir(d, { recursive: true })
      await writeFile(join(dirs[0]!, 'pids.max'), String(limits.pids))
      await writeFile(join(dirs[1]!, 'memory.limit_in_bytes'), String(limits.memoryBytes))
    } catch (err) {
      throw new UnsupportedError(`cannot set up cgroup ${parent}/${name}: ${(err as Error).message}`, { cause: err })
    }
    return new SandboxCgroup(dirs, root, join(parent, name))
  }

  /**
   * The group of a sandbox created earlier (by a layerd that crashed, say),
   * for `killAll`/`remove` during garbage collection. Sync; nothing is
   * checked or created.
   */
  static open (name: string, parent = 'layerd', root = CGROUP_V1_ROOT): SandboxCgroup {
    return new SandboxCgroup(CONTROLLERS.map(c => join(root, c, parent, name)), root, join(parent, name))
  }

  /** The cgroup.procs files a process writes its pid to in order to join. */
  get procsFiles (): string[] { return this.dirs.map(d => join(d, 'cgroup.procs')) }

  /** Pids in the group and its child groups (pids controller). Async; [] once removed. */
  async pids (): Promise<number[]> {
    const out: number[] = []
    const walk = async (dir: string): Promise<void> => {
      const text = await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => '')
      for (const l of text.split('\n')) if (l !== '') out.push(Number(l))
      for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) if (e.isDirectory()) await walk(join(dir, e.name))
    }
    await walk(this.dirs[0]!)
    return out
  }

  /** SIGKILL everything in the group until it is empty. Async; throws UnsupportedError if it will not empty. */
  async killAll (): Promise<void> {
    for (let round = 0; round < KILL_ROUNDS; round++) {
      const pids = await this.pids()
      if (pids.length === 0) return
      for (const pid of pids) { try { process.kill(pid, 'SIGKILL') } catch {} }
      await sleep(KILL_ROUND_PAUSE_MS)
    }
    throw new UnsupportedError(`cgroup ${this.dirs[0]} still holds processes after ${KILL_ROUNDS} kill rounds`)
  }

  /**
   * Kill everything and remove the group, with any child groups a runtime
   * made under it, from every v1 hierarchy (runc creates one per
   * controller) and from the v2 mount. Idempotent. Async.
   */
  async remove (): Promise<void> {
    await this.killAll()
    const hierarchies = await readdir(this.#root, { withFileTypes: true }).catch(() => [])
    for (const h of hierarchies) {
      if (h.isDirectory()) await removeTree(join(this.#root, h.name, this.#relative))
    }
  }
}

/** rmdir a cgroup directory after its child groups. A dying process keeps it EBUSY for a moment. */
async function removeTree (dir: string): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (e.isDirectory()) await removeTree(join(dir, e.name))
  }
  for (let i = 0; ; i++) {
    try { await rmdir(dir); return } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOENT') return
      if (code !== 'EBUSY' || i >= KILL_ROUNDS) throw new UnsupportedError(`cannot remove cgroup ${dir}: ${(err as Error).message}`, { cause: err })
      await sleep(KILL_ROUND_PAUSE_MS)
    }
  }
}

/**
 * argv that joins the given cgroup.procs files and then execs `argv`:
 * `sh -c 'for f; …'` writes its own pid (which `exec` keeps) to each.
 * Sync.
 */
export function joinCgroupArgv (procsFiles: readonly string[], argv: readonly string[]): string[] {
  const script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1"; shift; n=$((n-1)); done; exec "$@"'
  return ['sh', '-c', script, 'sh', String(procsFiles.length), ...procsFiles, ...argv]
}
