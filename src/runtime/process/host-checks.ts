/**
 * Preconditions shared by the Linux tiers: running as root, host programs
 * on PATH, overlayfs in the kernel, and sandbox ids that are safe as path
 * and cgroup names.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { access, constants, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { UsageError } from '../../errors.js'

const SANDBOX_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/
const SEARCH_PATH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin']

/** Throws UsageError unless `id` is 1-128 of [A-Za-z0-9_.-], starting alphanumeric. Sync. */
export function checkSandboxId (id: string): void {
  if (!SANDBOX_ID.test(id)) throw new UsageError(`sandbox id ${JSON.stringify(id)} must be 1-128 characters of A-Z a-z 0-9 _ . - starting with a letter or digit`)
}

/** The absolute path of `program` on the standard PATH, or undefined. Async. */
export async function findProgram (program: string): Promise<string | undefined> {
  for (const dir of SEARCH_PATH) {
    const p = join(dir, program)
    if (await access(p, constants.X_OK).then(() => true, () => false)) return p
  }
  return undefined
}

/**
 * Why a Linux tier cannot run here (not root, no overlayfs, a program
 * missing), or undefined. Async.
 */
export async function hostToolsUnavailableReason (programs: readonly string[]): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'the process and container tiers need root (mounts, cgroups)'
  const fs = await readFile('/proc/filesystems', 'utf8').catch(() => '')
  if (!/\toverlay$/m.test(fs)) return 'the kernel has no overlayfs'
  for (const p of programs) {
    if (await findProgram(p) === undefined) return `${p} is not installed (run .ci/setup)`
  }
  return undefined
}
