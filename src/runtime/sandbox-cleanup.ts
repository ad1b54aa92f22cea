/**
 * Removing a sandbox from its state alone, without the object that created
 * it: what `layerctl rm`, `layerctl gc --sandboxes` and layerd's start do for
 * sandboxes whose owner is gone. Idempotent: every step tolerates what an
 * earlier, interrupted cleanup already removed.
 *
 * May import: src/errors.ts, src/host/, src/state/, this folder.
 */
import { readdir, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { collectHost } from '../host/host-command.js'
import { OciRuntime } from './container/oci-runtime.js'
import { removeSandboxOverlay } from './overlay/sandbox-overlay.js'
import { SandboxCgroup } from './process/sandbox-cgroup.js'
import type { NodeDb } from '../state/node-db.js'
import { SandboxRegistry, type SandboxRecord } from './sandbox-registry.js'
import type { LogLine } from '../log-line.js'

/** Kill what still runs in the sandbox and remove its cgroup, runtime state, mounts and files. */
export async function cleanupSandbox (r: SandboxRecord): Promise<void> {
  const cgroup = SandboxCgroup.open(r.id)
  await cgroup.killAll().catch(() => {})
  if (r.tier === 'container') {
    for (const name of ['runc', 'crun'] as const) {
      const runtime = new OciRuntime(name)
      const ids = await readdir(runtime.stateRoot).catch(() => [] as string[])
      for (const id of ids.filter(n => n.startsWith(`${r.id}-e`))) await runQuietly(runtime.deleteArgv(id))
    }
  }
  if (r.tier === 'microvm' || r.tier === 'vm') await killPidFiles(r.stateDir)
  await cgroup.remove().catch(() => {})
  if (r.tier === 'process' || r.tier === 'container') await removeSandboxOverlay(r.stateDir)
  await rm(r.stateDir, { recursive: true, force: true })
}

/**
 * The one orphan sweep (layerd's start and `layerctl gc --sandboxes`):
 * remove every sandbox whose owning process is gone and that was not kept,
 * and its record. Async; never throws: a sandbox that cannot be removed is
 * logged, counted in `failed` and left for the next sweep.
 */
export async function removeOrphanedSandboxes (db: NodeDb, log: LogLine): Promise<{ removed: string[], failed: number }> {
  const registry = new SandboxRegistry(db)
  const removed: string[] = []
  let failed = 0
  for (const r of registry.list().filter(x => SandboxRegistry.status(x) === 'orphaned')) {
    try { await cleanupSandbox(r); registry.remove(r.id); removed.push(r.id) } catch (err) { failed++; log(`removing orphaned sandbox ${r.id}: ${(err as Error).message}`, 'warn') }
  }
  return { removed, failed }
}

/** VM drivers record their hypervisor's pid in `<stateDir>/*.pid`. */
async function killPidFiles (stateDir: string): Promise<void> {
  for (const f of (await readdir(stateDir).catch(() => [] as string[])).filter(n => n.endsWith('.pid'))) {
    const pid = Number((await readFile(join(stateDir, f), 'utf8').catch(() => '')).trim())
    if (Number.isSafeInteger(pid) && pid > 1) { try { process.kill(pid, 'SIGKILL') } catch {} }
  }
}

async function runQuietly (argv: string[]): Promise<void> {
  await collectHost(argv[0]!, argv.slice(1)).catch(() => {})
}
