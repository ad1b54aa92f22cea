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
import { access, mkdir, readFile, rmdir, writeFile } from 'node:fs/promises'
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

  private constructor (dirs: string[]) { this.dirs = dirs }

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
    return new SandboxCgroup(dirs)
  }

  /** The cgroup.procs files a process writes its pid to in order to join. */
  get procsFiles (): string[] { return this.dirs.map(d => join(d, 'cgroup.procs')) }

  /** Pids currently in the group (pids controller). Async; [] once removed. */
  async pids (): Promise<number[]> {
    const text = await readFile(join(this.dirs[0]!, 'cgroup.procs'), 'utf8').catch(() => '')
    return text.split('\n').filter(l => l !== '').map(Number)
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

  /** Kill everything and remove the directories. Idempotent. Async. */
  async remove (): Promise<void> {
    await this.killAll()
    for (const d of this.dirs) {
      // A killed process leaves the group a moment after it dies; rmdir says EBUSY until then.
      for (let i = 0; ; i++) {
        try { await rmdir(d); break } catch (err) {
          const code = (err as NodeJS.ErrnoException).code
          if (code === 'ENOENT') break
          if (code !== 'EBUSY' || i >= KILL_ROUNDS) throw new UnsupportedError(`cannot remove cgroup ${d}: ${(err as Error).message}`, { cause: err })
          await sleep(KILL_ROUND_PAUSE_MS)
        }
      }
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
