/**
 * Issue 34: every attempt the Linux tiers' seccomp wall refuses is recorded
 * (`src/runtime/seccomp/denial-supervisor.ts`) in the node database, with
 * the call, its object, the sandbox, the process; legitimate work records
 * nothing; a storm of denied calls is refused in full, recorded up to the
 * rate limit, and layerd keeps answering.
 */
import t from 'tap'
import { DenialTable, type DenialRow } from '../state/denial-table.js'
import { openNodeDb } from '../state/node-db.js'
import { connectDaemon } from '../daemon/client/daemon-launcher.js'
import { EVENT_BURST } from '../runtime/seccomp/denial-supervisor.js'
import { LINUX_TIERS, describe, forEachTier, jsonReport, python, sh, shutdownTest, startAttackNode } from './attack-harness.js'
import { EXPECTED_IN_SANDBOX, LOW_LEVEL_PROGRAM } from './low-level-calls.js'

const node = await startAttackNode(t)
const db = openNodeDb(node.home)
t.teardown(() => { db.close() })
const table = new DenialTable(db)
const eventsOf = (sandbox: string): DenialRow[] => table.list({ sandbox })

/** Kernel-facing calls refused by the deny list, each with what the event must say about its object. */
const KERNEL_CALLS = String.raw`
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
res = {}
def call(name, n, *args):
    r = libc.syscall(n, *args)
    res[name] = 'ok' if r >= 0 else errno.errorcode.get(ctypes.get_errno(), '?')
call('mount', 165, b'none', b'/mnt/evil', b'tmpfs', 0, None)
call('umount2', 166, b'/proc', 0)
call('pivot_root', 155, b'/tmp', b'/tmp/old')
call('bpf', 321, 5, None, 0)
call('perf_event_open', 298, None, 0, -1, -1, 0)
call('init_module', 175, None, 0, b'')
call('kexec_load', 246, 0, 0, None, 0)
call('ptrace', 101, 16, 1, 0, 0)
call('unshare', 272, 0x10000000)
call('setns', 308, 0, 0)
print(json.dumps(res, sort_keys=True))
`
const KERNEL_EXPECTED: ReadonlyArray<[string, string | RegExp]> = [
  ['seccomp:mount', '/mnt/evil'],
  ['seccomp:umount2', '/proc'],
  ['seccomp:pivot_root', '/tmp'],
  ['seccomp:bpf', '0x5 0x0 0x0'],
  ['seccomp:perf_event_open', /^0x0 0x0 0xf{16}$/],
  ['seccomp:init_module', /^0x0 0x0 0x[0-9a-f]+$/],
  ['seccomp:kexec_load', '0x0 0x0 0x0'],
  ['seccomp:ptrace', '0x10 0x1 0x0'],
  ['seccomp:unshare', 'flags 0x10000000 (CLONE_NEWUSER)'],
  ['seccomp:setns', /^0x0 0x0 0x[0-9a-f]+$/] // setns has two arguments: the third register is whatever the caller left there
]

await forEachTier(t, LINUX_TIERS, 'kernel-facing calls are refused with EPERM and each is recorded exactly', async (t, tier) => {
  const sb = await node.sandbox(t, tier)
  const r = await python(sb, KERNEL_CALLS, { user: 'root', timeoutMs: 60_000 })
  const report = jsonReport(r)
  for (const [hook] of KERNEL_EXPECTED) t.equal(report[hook.slice('seccomp:'.length)], 'EPERM', `${hook}: EPERM (${describe(r)})`)
  const events = eventsOf(sb.id)
  t.same(events.map(e => e.hook), KERNEL_EXPECTED.map(([hook]) => hook), 'one event per call, in order, nothing else')
  for (const [i, [hook, object]] of KERNEL_EXPECTED.entries()) {
    const e = events[i]
    if (e === undefined) continue
    if (typeof object === 'string') t.equal(e.object, object, `${hook} object`)
    else t.match(e.object, object, `${hook} object`)
    t.equal(e.sandbox, sb.id)
    t.equal(e.tier, tier)
    t.equal(e.image, sb.image)
    t.equal(e.comm, 'python3')
    t.ok(e.pid >= 1 && e.pid < 10, `pid inside the sandbox (${e.pid})`)
    t.ok(Math.abs(Date.parse(e.time) - Date.now()) < 120_000, 'time is now')
  }
})

await forEachTier(t, LINUX_TIERS, 'attack 3 (low-level calls): the same answers as without recording, and every seccomp refusal recorded', async (t, tier) => {
  const sb = await node.sandbox(t, tier)
  const r = await python(sb, LOW_LEVEL_PROGRAM, { args: ['sandbox'], user: 'root', timeoutMs: 60_000 })
  t.same(jsonReport(r), EXPECTED_IN_SANDBOX, `same table as attack 3 (${describe(r)})`)
  const events = eventsOf(sb.id)
  const ioctls = events.filter(e => e.hook === 'seccomp:ioctl').map(e => e.object.replace(/^fd \d+ /, ''))
  const expectedIoctls = ['lower', 'own', 'root'].flatMap(() => [
    'request 0x40086602 (FS_IOC_SETFLAGS)',
    'request 0x401c5820 (\'X\' range (XFS, FS_IOC_FSSETXATTR, FIFREEZE, FITRIM, GOINGDOWN))',
    'request 0xc020660b (FS_IOC_FIEMAP)',
    'request 0x1 (FIBMAP)',
    'request 0x8100587e (\'X\' range (XFS, FS_IOC_FSSETXATTR, FIFREEZE, FITRIM, GOINGDOWN))',
    'request 0x8004587d (\'X\' range (XFS, FS_IOC_FSSETXATTR, FIFREEZE, FITRIM, GOINGDOWN))',
    'request 0xc0045877 (\'X\' range (XFS, FS_IOC_FSSETXATTR, FIFREEZE, FITRIM, GOINGDOWN))'
  ])
  t.same(ioctls, expectedIoctls, 'the 21 ioctls, each recorded with its request number')
  t.same(events.filter(e => e.hook !== 'seccomp:ioctl').map(e => [e.hook, e.object]), [
    ['seccomp:name_to_handle_at', '/etc/passwd'],
    ['seccomp:open_by_handle_at', events.find(e => e.hook === 'seccomp:open_by_handle_at')?.object ?? 'missing']
  ], 'and the two file-handle calls; nothing else')
})

await forEachTier(t, LINUX_TIERS, 'legitimate work records nothing: pip-like writes, compiling, ioctls on own files, threads and forks', async (t, tier) => {
  const sb = await node.sandbox(t, tier)
  const work = String.raw`
import fcntl, json, os, struct, subprocess, sys, termios, threading, py_compile
os.makedirs('/usr/local/lib/python3.11/dist-packages/demo', exist_ok=True)
open('/usr/local/lib/python3.11/dist-packages/demo/__init__.py', 'w').write('X = 1\n')
py_compile.compile('/usr/local/lib/python3.11/dist-packages/demo/__init__.py', doraise=True)
sys.path.insert(0, '/usr/local/lib/python3.11/dist-packages')
import demo
fd = os.open('/tmp/own', os.O_RDWR | os.O_CREAT)
os.write(fd, b'abc')
flags = fcntl.ioctl(fd, 0x80086601, struct.pack('l', 0))  # FS_IOC_GETFLAGS
n = fcntl.ioctl(fd, 0x541B, struct.pack('i', 0))            # FIONREAD
os.close(fd)
ts = [threading.Thread(target=lambda: sum(range(1000))) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
out = subprocess.run(['sh', '-c', 'echo hi | tr a-z A-Z; mkdir -p /root/work && cd /root/work && echo "int main(){return 0;}" > a.c && ls'], capture_output=True, text=True).stdout
print(json.dumps({'demo': demo.X, 'out': out}))
`
  const r = await python(sb, work, { user: 'root', timeoutMs: 60_000 })
  t.equal(r.exitCode, 0, describe(r))
  t.same(jsonReport<{ demo: number }>(r).demo, 1)
  const tar = await sh(sb, 'cd /tmp && tar cf x.tar /etc/hostname 2>/dev/null; tar tf x.tar; dd if=/dev/zero of=/tmp/z bs=1M count=4 2>&1 | tail -n 1')
  t.equal(tar.exitCode, 0, describe(tar))
  t.same(eventsOf(sb.id), [], 'no event')
})

await forEachTier(t, LINUX_TIERS, 'a storm of denied calls: every call refused, events rate-limited with a drop count, layerd responsive', async (t, tier) => {
  const sb = await node.sandbox(t, tier)
  const before = table.counts().find(c => c.hook === 'dropped' && c.tier === tier)?.dropped ?? 0
  const storm = String.raw`
import ctypes, json, time
libc = ctypes.CDLL(None, use_errno=True)
n, refused, end = 0, 0, time.time() + 3
while time.time() < end:
    for _ in range(200):
        if libc.syscall(165, b'none', b'/mnt/storm', b'tmpfs', 0, None) < 0 and ctypes.get_errno() == 1: refused += 1
        n += 1
print(json.dumps({'n': n, 'refused': refused}))
`
  const exec = python(sb, storm, { user: 'root', timeoutMs: 60_000 })
  const pings: number[] = []
  const client = await connectDaemon({ home: node.home, autoStart: false })
  const pinger = (async () => {
    for (let i = 0; i < 10; i++) {
      const t0 = performance.now()
      await client.call('ping', {})
      pings.push(performance.now() - t0)
      await new Promise(resolve => setTimeout(resolve, 200))
    }
  })()
  const r = await exec
  await pinger
  client.close()
  const { n, refused } = jsonReport<{ n: number, refused: number }>(r)
  t.ok(n > EVENT_BURST * 4, `the storm made ${n} calls`)
  t.equal(refused, n, 'every one refused with EPERM')
  const recorded = eventsOf(sb.id).length
  t.ok(recorded >= EVENT_BURST && recorded < n, `recorded ${recorded} of ${n}: the burst, then the rate`)
  t.ok(recorded <= EVENT_BURST + 20 * 10, 'no more than the burst plus the rate over the storm')
  const after = table.counts().find(c => c.hook === 'dropped' && c.tier === tier)?.dropped ?? 0
  t.equal(after - before, n - recorded, 'the rest counted as dropped')
  t.ok(Math.max(...pings) < 5000, `layerd answered every ping (slowest ${Math.round(Math.max(...pings))} ms)`)
})

shutdownTest(t, node)
