/**
 * Attack 7: layerd dies (SIGKILL) while a sandbox reads image files, and so
 * does its holder (src/holder/), which would otherwise keep the FUSE
 * connections and have a new layerd take them over (readers would not
 * notice: src/holder/crash-takeover.test.ts). With both gone, the
 * sandbox's processes are not layerd's children, so they live on; their
 * reads of the image that need layerd fail with an error (the kernel
 * aborts the dead FUSE connection: ENOTCONN/ECONNABORTED/EIO) within a
 * stated bound, never hang. Pages already in the page cache keep being
 * served: they are the image's immutable, verified content. The next `createSandbox` starts layerd again, which cleans the dead
 * mount, mounts the image again and serves new sandboxes. The orphaned
 * sandbox cannot be revived (its overlay holds the dead mount) but is
 * destroyed cleanly.
 *
 * May import: ./attack-harness.ts, ./containment.ts, src/, tap (types).
 */
import { Writable } from 'node:stream'
import type { Test } from 'tap'
import { mountsUnder } from '../host/mount-table.js'
import type { Tier } from '../runtime/sandbox.js'
import { describe, sh, type AttackNode } from './attack-harness.js'
import { assertContained, takeBaseline } from './containment.js'

/** A reader must get its error within this of the kill. */
export const READ_ERROR_BOUND_MS = 10_000
/** A new sandbox (layerd restarted by createSandbox, image mounted again) must run within this. */
export const RECOVERY_BOUND_MS = 30_000

// Each pass drops the files from the page cache (dd iflag=nocache), so every pass needs layerd: pages
// already cached are immutable, verified content and keep being served after the kill (no OPEN reaches
// the daemon with the kernel FUSE backend); what must fail fast is a read that needs the dead daemon.
const READER = 'while :; do for f in /usr/bin/python3.11 /usr/lib/x86_64-linux-gnu/libcrypto.so.3 /usr/lib/python3.11/typing.py; do ' +
  'dd if=$f of=/dev/null bs=1M iflag=nocache status=none || exit 3; done; echo pass; done'
// ld.so reports the errno by number ("Error 107") when it cannot open a library.
const FUSE_GONE = /Transport endpoint is not connected|Software caused connection abort|Input\/output error|No such device|Error (103|107|5)\b/

/** The whole attack on one Linux tier (the node is this test's own: its layerd is killed). */
export async function daemonDeathAttack (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const victim = await node.sandbox(t, tier)
  const mount = node.imageMount(victim)
  const before = await takeBaseline(node)
  // Kill only once the reader reads (a container's process can take seconds to start on a loaded machine).
  let passes = ''
  const sink = new Writable({ write (c: Buffer, _e, done) { passes = (passes + c.toString()).slice(-64); done() } })
  const reading = victim.exec({ cmd: ['sh', '-c', READER], timeoutMs: 60_000, stdout: sink })
  for (let i = 0; i < 300 && !passes.includes('pass'); i++) await new Promise(resolve => setTimeout(resolve, 100))
  t.ok(passes.includes('pass'), 'the reader read the files once before the kill')
  await new Promise(resolve => setTimeout(resolve, 300))
  // Both at once, stopped first: a holder killed alone is replaced by layerd (src/holder/rescue-holder.ts), so
  // neither may run between the two kills; then no process holds the connections.
  const pids = [await node.layerd.holderPid(), await node.layerd.daemonPid()].filter((p): p is number => p !== undefined)
  for (const pid of pids) process.kill(pid, 'SIGSTOP')
  await node.layerd.killHolder()
  const killedAt = performance.now()
  await node.layerd.killDaemon()
  const r = await reading
  const errorMs = performance.now() - killedAt
  t.equal(r.exitCode, 3, `the reader's cat failed and it exited: ${describe(r)}`)
  t.equal(r.timedOut, false, 'no hang')
  t.ok(errorMs < READ_ERROR_BOUND_MS, `the reader got its error ${Math.round(errorMs)} ms after the kill (bound ${READ_ERROR_BOUND_MS} ms)`)
  t.match(r.stderr.toString(), FUSE_GONE, `with a clean error from the dead mount: ${r.stderr.toString().slice(0, 500)}`)

  // exec() reads the image's /etc/passwd (through the dead mount) before it starts anything: it may reject instead.
  const lateStarted = performance.now()
  const late = await sh(victim, 'cat /etc/os-release', { timeoutMs: READ_ERROR_BOUND_MS }).then(x => describe(x), (err: Error) => `rejected: ${err.message}`)
  t.ok(performance.now() - lateStarted < READ_ERROR_BOUND_MS, `a new command in the orphaned sandbox fails without hanging: ${late}`)
  t.notMatch(late, /^exit 0 /, '… it fails')

  const started = performance.now()
  const next = await node.sandbox(t, tier) // no layerd running: createSandbox starts one
  const py = await sh(next, 'python3 -c "import json; print(json.dumps(2+2))"', { timeoutMs: RECOVERY_BOUND_MS })
  const recoveryMs = performance.now() - started
  t.equal(py.stdout.toString(), '4\n', `a new sandbox runs python3: ${describe(py)}`)
  t.ok(recoveryMs < RECOVERY_BOUND_MS, `layerd came back and served a new sandbox in ${Math.round(recoveryMs)} ms`)
  t.not(await node.layerd.daemonPid(), before.daemonPid, 'a new layerd process serves the node')
  t.equal(node.imageMount(next), mount, 'the image is mounted again at the same place')

  await victim.destroy()
  t.same(await mountsUnder(victim.stateDir), [], 'the orphaned sandbox is destroyed cleanly (no mount left)')
  await assertContained(t, node, before, { mounts: [mount], daemonRestarted: true })
  await next.destroy()
}
