/**
 * What every attack test asserts after the attack: containment.
 *
 * - the store: no object changed or disappeared (content digests), and none
 *   added (a VM tier's block view is built when its first sandbox is
 *   created, before the baseline);
 * - the image: the watched files on layerd's FUSE mount still have the
 *   fixture's bytes, and the mount counts no corrupt chunk;
 * - layerd: the same process still answers its control socket, within a bound;
 * - the node's disk: each sandbox's state directory holds no more than its
 *   quota (plus file-system overhead), and the host file system did not lose
 *   more than that (with slack for the other jobs sharing this machine).
 *
 * May import: src/, fixtures/, tap (types), node built-ins.
 */
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { readdir, readFile, statfs } from 'node:fs/promises'
import { join } from 'node:path'
import type { Test } from 'tap'
import { runCommand } from '../../fixtures/run-command.js'
import { ControlClient } from '../daemon/client/control-client.js'
import { socketPath } from '../daemon/client/control-protocol.js'
import type { AttackNode } from './attack-harness.js'

/** layerd must answer a ping within this, even right after an attack. */
export const DAEMON_ANSWER_BOUND_MS = 5000
/** The key files of the image: the shell, python and libc. */
export const WATCHED_FILES = ['usr/bin/dash', 'usr/bin/bash', 'usr/bin/python3.11', 'usr/lib/x86_64-linux-gnu/libc.so.6', 'usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2']
/** ext4 metadata, the overlay work dir, bundles and logs, on top of the quota. */
export const STATE_OVERHEAD_BYTES = 24 * 1024 ** 2
/** Other test jobs write to the same host file system while an attack runs. */
export const HOST_NOISE_BYTES = 512 * 1024 ** 2

export const sha256File = async (p: string): Promise<string> => createHash('sha256').update(await readFile(p)).digest('hex')

/** sha256 of a large file, streamed. Async. */
export async function sha256Stream (p: string): Promise<string> {
  const h = createHash('sha256')
  for await (const c of createReadStream(p)) h.update(c as Buffer)
  return h.digest('hex')
}

/** sha256 of every file under `dir`, by relative path. Async. */
export async function snapshotStore (dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>()
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue
    const p = join(e.parentPath, e.name)
    out.set(p.slice(dir.length + 1), await sha256File(p))
  }
  return out
}

/** Differences between two store snapshots, one line each. Sync. */
export function storeDifferences (before: Map<string, string>, after: Map<string, string>): string[] {
  const out: string[] = []
  for (const [k, v] of before) {
    const now = after.get(k)
    if (now === undefined) out.push(`${k}: removed`)
    else if (now !== v) out.push(`${k}: changed`)
  }
  for (const k of after.keys()) if (!before.has(k)) out.push(`${k}: added`)
  return out
}

/** Milliseconds layerd took to answer a ping on `home`'s socket. Async; rejects when it does not answer. */
export async function pingDaemon (home: string): Promise<number> {
  const started = performance.now()
  const c = await ControlClient.connect(socketPath(home), DAEMON_ANSWER_BOUND_MS)
  try {
    await Promise.race([
      c.call('ping'),
      new Promise((_resolve, reject) => setTimeout(() => reject(new Error(`layerd did not answer a ping within ${DAEMON_ANSWER_BOUND_MS} ms`)), DAEMON_ANSWER_BOUND_MS).unref())
    ])
  } finally {
    c.close()
  }
  return performance.now() - started
}

/** Bytes allocated on the host under `dir` (`du`: sparse files count only what they use). Async. */
export async function allocatedBytes (dir: string): Promise<number> {
  const out = await runCommand('du', ['-s', '-B1', '-x', dir])
  return Number(out.split(/\s/)[0])
}

/** Per-mount counters from `layerctl stats MOUNT --json`. Async. */
export async function mountStats (node: AttackNode, mountpoint: string): Promise<Record<string, number>> {
  const r = await node.layerd.layerctl('stats', mountpoint, '--json')
  if (r.code !== 0) throw new Error(`layerctl stats ${mountpoint} failed: ${r.stderr}`)
  return JSON.parse(r.stdout) as Record<string, number>
}

export interface Baseline {
  store: Map<string, string>
  daemonPid: number | undefined
  hostAvailableBytes: number
  hostDir: string
}

/** What the node looks like before an attack. Async. */
export async function takeBaseline (node: AttackNode): Promise<Baseline> {
  const fs = await statfs(node.home)
  return { store: await snapshotStore(node.storeDir), daemonPid: await node.layerd.daemonPid(), hostAvailableBytes: fs.bavail * fs.bsize, hostDir: node.home }
}

export interface ContainmentCheck {
  /** Image mounts whose watched files must equal the fixture's. */
  mounts?: string[]
  /** Sandbox state dirs and their quotas: each must stay within quota + overhead. */
  sandboxes?: Array<{ stateDir: string, diskBytes: number }>
  /** Set when the test itself restarted layerd (daemon death). */
  daemonRestarted?: boolean
}

/** Assert containment after an attack (see the module doc). Async. */
export async function assertContained (t: Test, node: AttackNode, before: Baseline, check: ContainmentCheck = {}): Promise<void> {
  t.same(storeDifferences(before.store, await snapshotStore(node.storeDir)), [], 'the store is unchanged: no object changed, removed or added')
  const ms = await pingDaemon(node.home)
  t.ok(ms < DAEMON_ANSWER_BOUND_MS, `layerd answers (${Math.round(ms)} ms)`)
  if (check.daemonRestarted !== true) t.equal(await node.layerd.daemonPid(), before.daemonPid, 'the same layerd process is still serving')
  for (const mnt of check.mounts ?? []) {
    const differing: string[] = []
    for (const f of WATCHED_FILES) {
      if (await sha256File(join(mnt, f)) !== await sha256File(join(node.fixtureRootfs, f))) differing.push(f)
    }
    t.same(differing, [], `the image mount serves the fixture's shell, python and libc (${WATCHED_FILES.length} files, sha256)`)
    t.equal((await mountStats(node, mnt)).corruptChunks, 0, 'the mount has served no corrupt chunk')
  }
  let quotaTotal = 0
  for (const s of check.sandboxes ?? []) {
    const used = await allocatedBytes(s.stateDir).catch(() => 0) // a destroyed sandbox has no state left
    quotaTotal += s.diskBytes + STATE_OVERHEAD_BYTES
    t.ok(used <= s.diskBytes + STATE_OVERHEAD_BYTES, `sandbox state uses ${(used / 1024 ** 2).toFixed(1)} MiB on the host, within its ${(s.diskBytes / 1024 ** 2).toFixed(0)} MiB quota + overhead`)
  }
  const fs = await statfs(before.hostDir)
  const lost = before.hostAvailableBytes - fs.bavail * fs.bsize
  t.ok(lost < quotaTotal + HOST_NOISE_BYTES, `host free space fell by ${(lost / 1024 ** 2).toFixed(1)} MiB (bound: the quotas + ${HOST_NOISE_BYTES / 1024 ** 2} MiB for other jobs)`)
}
