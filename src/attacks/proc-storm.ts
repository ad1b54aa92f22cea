/**
 * Attack 4: /proc and /sys storms (the paper's agents crashed a host
 * kernel with a recursive read of /proc). Inside a sandbox, threads walk
 * /proc and /sys reading every file, one walker follows symlinks (so
 * /proc/N/root leads back to / and /proc again, endlessly: the recursion
 * an agent's `grep -R` makes), and the program tries to write a host-wide
 * sysctl and a sysfs attribute. Two such storms run at once.
 *
 * What must hold: each storm ends by itself (the walkers' deadline) and
 * well within a stated bound; the sandbox sees only its own processes (own
 * pid namespace) and no host process; /sys is absent (process tier) or
 * read-only (container tier); /proc/sys is read-only; the host's sysctls
 * are unchanged; layerd answers pings throughout.
 *
 * May import: ./attack-harness.ts, ./containment.ts, src/, tap (types).
 */
import { readFile, writeFile } from 'node:fs/promises'
import type { Test } from 'tap'
import type { ExecResult, Tier } from '../runtime/sandbox.js'
import type { ManagedSandbox } from '../sandbox/create-sandbox.js'
import { describe, jsonReport, python, type AttackNode } from './attack-harness.js'
import { DAEMON_ANSWER_BOUND_MS, assertContained, pingDaemon, takeBaseline } from './containment.js'

/** How long the walkers run (seconds, inside). */
export const STORM_SECONDS = 6
/** An exec running the storm must return within this (the walkers stop after STORM_SECONDS). */
export const STORM_BOUND_MS = 60_000

export const STORM_PROGRAM = String.raw`
import errno, json, os, sys, threading, time
deadline = time.monotonic() + float(sys.argv[1])
stats = {'files': 0, 'bytes': 0, 'errors': 0, 'followed': 0, 'slowest_ms': 0}
lock = threading.Lock()
def read(path):
    t0 = time.monotonic()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            n = len(os.read(fd, 65536))
        finally:
            os.close(fd)
        with lock:
            stats['files'] += 1
            stats['bytes'] += n
    except OSError:
        with lock:
            stats['errors'] += 1
    ms = int((time.monotonic() - t0) * 1000)
    with lock:
        stats['slowest_ms'] = max(stats['slowest_ms'], ms)
def walk(top, follow):
    while time.monotonic() < deadline:
        for root, dirs, files in os.walk(top, followlinks=follow):
            if time.monotonic() > deadline:
                return
            if follow:
                with lock:
                    stats['followed'] += 1
            for f in files:
                read(os.path.join(root, f))
threads = [threading.Thread(target=walk, args=(top, follow)) for top, follow in [('/proc', False), ('/sys', False), ('/proc', False), ('/proc/self/root/proc', True)]]
for t in threads:
    t.start()
def write(path, value):
    try:
        with open(path, 'w') as f:
            f.write(value)
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def cmdline(pid):
    try:
        return open('/proc/%s/cmdline' % pid, 'rb').read().replace(b'\0', b' ').decode(errors='replace')
    except OSError:
        return ''
sys_mount = 'absent'
for line in open('/proc/self/mountinfo'):
    f = line.split()
    if f[4] == '/sys':
        sys_mount = 'ro' if 'ro' in f[5].split(',') else 'rw'
report = {
    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
    'cmdlines': [cmdline(p) for p in os.listdir('/proc') if p.isdigit()],
    'sys': sys_mount,
    'write /proc/sys/kernel/printk_ratelimit': write('/proc/sys/kernel/printk_ratelimit', '11'),
    'write /sys/kernel/mm/transparent_hugepage/enabled': write('/sys/kernel/mm/transparent_hugepage/enabled', 'never'),
}
for t in threads:
    t.join()
report.update(stats)
print(json.dumps(report))
`

export interface StormReport {
  pids: number[]
  cmdlines: string[]
  sys: 'absent' | 'ro' | 'rw'
  files: number
  followed: number
  errors: number
  slowest_ms: number
  'write /proc/sys/kernel/printk_ratelimit': string
  'write /sys/kernel/mm/transparent_hugepage/enabled': string
}

/** Host tunables a storm must not change (a caller with write access to /proc/sys could). */
export const HOST_SYSCTLS = ['kernel/printk_ratelimit', 'kernel/pid_max', 'kernel/threads-max', 'kernel/panic', 'kernel/hostname', 'vm/overcommit_memory', 'vm/swappiness', 'fs/file-max']

/** The host's values of {@link HOST_SYSCTLS}. Async. */
export async function hostSysctls (): Promise<Record<string, string>> {
  return Object.fromEntries(await Promise.all(HOST_SYSCTLS.map(async s => [s, (await readFile(`/proc/sys/${s}`, 'utf8')).trim()])))
}

/** Run one storm inside (as root). */
export async function runStorm (sb: ManagedSandbox): Promise<ExecResult> {
  return await python(sb, STORM_PROGRAM, { args: [String(STORM_SECONDS)], user: 'root', timeoutMs: STORM_BOUND_MS })
}

/** What every tier must show in a storm's report; `tier` decides what /sys and /proc/sys look like. */
export function checkStorm (t: Test, r: ExecResult, tier: Tier): void {
  t.equal(r.timedOut, false, `the storm ended by itself (walkers stop after ${STORM_SECONDS} s; bound ${STORM_BOUND_MS} ms): ${describe(r)}`)
  const report = jsonReport<StormReport>(r)
  t.ok(report.files > 500, `it read ${report.files} files in /proc and /sys (${report.errors} refused), followed ${report.followed} directories through /proc/*/root`)
  // A VM's /proc is its own kernel's (kernel threads included); a Linux tier's is its own pid namespace.
  if (tier === 'process' || tier === 'container') t.ok(report.pids.length < 32, `it sees only its own processes: pids ${report.pids.join(' ')}`)
  t.same(report.cmdlines.filter(c => /layerd\/main\.js|\bnode\b|\btap\b|systemd|\/sbin\/init/.test(c)), [], 'no host process (layerd, node, the test runner, init) is visible')
  if (tier === 'process' || tier === 'container') {
    t.equal(report['write /proc/sys/kernel/printk_ratelimit'], 'EROFS', '/proc/sys is read-only: host-wide sysctls cannot be written')
    t.equal(report.sys, tier === 'process' ? 'absent' : 'ro', tier === 'process' ? 'no sysfs is mounted' : 'sysfs is mounted read-only')
    t.equal(report['write /sys/kernel/mm/transparent_hugepage/enabled'], tier === 'process' ? 'ENOENT' : 'EROFS', 'a sysfs attribute cannot be written')
  }
}

/** The whole attack on one Linux tier: two storms at once while the host pings layerd. */
export async function procStormAttack (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const sysctls = await hostSysctls()
  // Should a tier let the write through, put the host's value back whatever the test's outcome.
  t.teardown(async () => { await writeFile('/proc/sys/kernel/printk_ratelimit', sysctls['kernel/printk_ratelimit']!).catch(() => {}) })
  const sb = await node.sandbox(t, tier)
  const before = await takeBaseline(node)
  let storming = true
  let slowestPing = 0
  let pings = 0
  const pinger = (async () => {
    while (storming) {
      slowestPing = Math.max(slowestPing, await pingDaemon(node.home))
      pings++
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  })()
  const started = performance.now()
  const storms = await Promise.all([runStorm(sb), runStorm(sb)])
  storming = false
  await pinger
  for (const r of storms) checkStorm(t, r, tier)
  t.ok(performance.now() - started < STORM_BOUND_MS, `both storms ended in ${Math.round(performance.now() - started)} ms`)
  t.ok(slowestPing < DAEMON_ANSWER_BOUND_MS, `layerd answered ${pings} pings during the storm, the slowest in ${Math.round(slowestPing)} ms`)
  t.match(await readFile('/proc/loadavg', 'utf8'), /^\d+\.\d+ /, 'the host\'s /proc still answers')
  t.same(await hostSysctls(), sysctls, `the host's sysctls are unchanged (${Object.keys(sysctls).length} checked)`)
  const again = await python(sb, 'print("alive")', { timeoutMs: 30_000 })
  t.equal(again.stdout.toString(), 'alive\n', 'the sandbox still runs commands afterwards')
  await assertContained(t, node, before, { mounts: [node.imageMount(sb)] })
}
