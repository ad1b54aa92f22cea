/**
 * Attack 5: fork bombs and memory hogs. A shell fork bomb and a python
 * thread bomb hit the sandbox's pids limit; a python memory hog and a
 * /dev/shm filler hit its memory limit and the /dev/shm size. The
 * sandbox's cgroup shows the limits held (pids.peak, memory.max_usage);
 * the exec returns within a stated bound, nothing is left running, the
 * sandbox works again, and layerd and the host carry on.
 *
 * May import: ./attack-harness.ts, ./containment.ts, src/, tap (types).
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Test } from 'tap'
import type { Tier } from '../runtime/sandbox.js'
import { CGROUP_V1_ROOT } from '../runtime/process/sandbox-cgroup.js'
import { MIB, describe, python, sh, type AttackNode } from './attack-harness.js'
import { assertContained, takeBaseline } from './containment.js'

export const BOMB_PIDS = 64
export const HOG_MEMORY_BYTES = 128 * MIB
/** The bomb runs until this timeout kills it… */
export const BOMB_TIMEOUT_MS = 3000
/** …and the exec must be back within this of the start (the kill walks the whole tree). */
export const BOMB_BOUND_MS = 20_000
export const HOG_BOUND_MS = 60_000

const THREAD_BOMB = `
import threading, time
n = 0
try:
    while n < 100000:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        n += 1
    print('threads=unbounded')
except RuntimeError as e:
    print('threads=%d stopped: %s' % (n, e))
`

const MEMORY_HOG = `
chunks = []
while True:
    chunks.append(bytearray(8 << 20))
    chunks[-1][::4096] = b'x' * len(chunks[-1][::4096])  # touch every page
`

/** `<controller>/layerd/<id>/<file>` of a sandbox's cgroup. Async. */
async function cgroupValue (controller: 'pids' | 'memory', id: string, file: string): Promise<number> {
  return Number((await readFile(join(CGROUP_V1_ROOT, controller, 'layerd', id, file), 'utf8')).trim())
}

/** Exiting tasks leave their cgroup a moment after the exec has returned. */
const SETTLE_MS = 3000

/** Processes still in the sandbox's pids cgroup once it settled (up to {@link SETTLE_MS}). Async. */
async function processesLeft (id: string): Promise<number> {
  const deadline = performance.now() + SETTLE_MS
  let n = await processesInCgroup(id)
  while (n > 0 && performance.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 50))
    n = await processesInCgroup(id)
  }
  return n
}

/** Processes in the sandbox's pids cgroup, its exec sub-groups included. Async. */
async function processesInCgroup (id: string): Promise<number> {
  const root = join(CGROUP_V1_ROOT, 'pids', 'layerd', id)
  let n = 0
  for (const e of ['', ...await readdir(root, { recursive: true })]) {
    if (e !== '' && !e.endsWith('cgroup.procs')) continue
    const file = e === '' ? join(root, 'cgroup.procs') : join(root, e)
    n += (await readFile(file, 'utf8').catch(() => '')).split('\n').filter(l => l !== '').length
  }
  return n
}

/** Fork and thread bombs against the pids limit, on one Linux tier. */
export async function forkBombAttack (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const sb = await node.sandbox(t, tier, { pids: BOMB_PIDS })
  const before = await takeBaseline(node)
  const started = performance.now()
  const bomb = await sh(sb, 'b() { b | b & }; b; while :; do sleep 1; done', { timeoutMs: BOMB_TIMEOUT_MS, user: 'root' })
  const ms = performance.now() - started
  // Either the timeout kills the tree, or the bomb's own shell dies of a failed fork first (dash treats that as
  // fatal) and its pid namespace takes every bomb process with it: both are the limit holding.
  t.ok(bomb.timedOut || bomb.exitCode !== 0, `the bomb did not run to completion: ${bomb.timedOut ? 'killed by the timeout' : `its shell died (exit ${bomb.exitCode})`}`)
  t.ok(ms < BOMB_BOUND_MS, `the whole tree was killed and the exec returned ${Math.round(ms)} ms after the start (bound ${BOMB_BOUND_MS} ms)`)
  t.match(bomb.stderr.toString(), /fork|Resource temporarily unavailable/i, 'forks failed with EAGAIN at the limit')
  const peak = await cgroupValue('pids', sb.id, 'pids.peak')
  t.ok(peak <= BOMB_PIDS, `the sandbox never had more than ${BOMB_PIDS} tasks (pids.peak ${peak})`)
  t.equal(await processesLeft(sb.id), 0, `nothing of the bomb is left running (${SETTLE_MS} ms to settle)`)
  const threads = await python(sb, THREAD_BOMB, { timeoutMs: BOMB_BOUND_MS, user: 'root' })
  t.match(threads.stdout.toString(), /^threads=\d+ stopped: can't start new thread/m, `a thread bomb stops at the limit too: ${describe(threads)}`)
  t.ok(Number(/threads=(\d+)/.exec(threads.stdout.toString())?.[1]) < BOMB_PIDS, 'with fewer threads than the limit')
  const alive = await sh(sb, 'echo alive', { timeoutMs: 10_000 })
  t.equal(alive.stdout.toString(), 'alive\n', 'the sandbox runs commands again')
  await assertContained(t, node, before, { mounts: [node.imageMount(sb)] })
}

/** A memory hog and a /dev/shm filler against the memory limit, on one Linux tier. */
export async function memoryHogAttack (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const sb = await node.sandbox(t, tier, { memoryBytes: HOG_MEMORY_BYTES })
  const before = await takeBaseline(node)
  const hog = await python(sb, MEMORY_HOG, { timeoutMs: HOG_BOUND_MS, user: 'root' })
  t.equal(hog.timedOut, false, `the hog was stopped by the limit, not by the timeout: ${describe(hog)}`)
  t.ok(hog.exitCode === 137 || /MemoryError/.test(hog.stderr.toString()), `it was OOM-killed (exit 137) or got MemoryError: ${describe(hog)}`)
  const maxUsage = await cgroupValue('memory', sb.id, 'memory.max_usage_in_bytes')
  t.ok(maxUsage <= HOG_MEMORY_BYTES, `the sandbox's memory use peaked at ${(maxUsage / MIB).toFixed(1)} MiB, within its ${HOG_MEMORY_BYTES / MIB} MiB`)
  t.ok(await cgroupValue('memory', sb.id, 'memory.failcnt') > 0, 'the memory cgroup refused allocations')
  const shm = await sh(sb, 'head -c 256M /dev/zero > /dev/shm/fill; echo "shm=$?"; rm -f /dev/shm/fill', { timeoutMs: HOG_BOUND_MS, user: 'root' })
  t.match(shm.stdout.toString(), /^shm=1$/m, '/dev/shm stops at its size')
  t.match(shm.stderr.toString(), /No space left on device/, `… with ENOSPC: ${describe(shm)}`)
  t.equal(await processesLeft(sb.id), 0, `nothing is left running (${SETTLE_MS} ms to settle)`)
  const alive = await sh(sb, 'echo alive', { timeoutMs: 10_000 })
  t.equal(alive.stdout.toString(), 'alive\n', 'the sandbox runs commands again')
  await assertContained(t, node, before, { mounts: [node.imageMount(sb)] })
}
