/**
 * Attack 2: flood the disk (the paper's agents ran `yes` into a file). `yes`,
 * `dd` and `fallocate` past the quota, then an inode flood: each stops with
 * ENOSPC at the sandbox's quota; deleting frees the space again. Meanwhile
 * another sandbox writes and reads its own files, and the host reads a file
 * through layerd's mount: neither notices. The host file system loses at
 * most the quota.
 *
 * May import: ./attack-harness.ts, ./containment.ts, src/, tap (types).
 */
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Test } from 'tap'
import type { ExecResult, Tier } from '../runtime/sandbox.js'
import type { ManagedSandbox } from '../sandbox/create-sandbox.js'
import { ATTACK_LIMITS, MIB, describe, sh, type AttackNode } from './attack-harness.js'
import { assertContained, takeBaseline } from './containment.js'

/** The flood must end (every tool stopped by ENOSPC) within this. */
export const FLOOD_BOUND_MS = 60_000
const INODE_FLOOD_MAX = 500_000

/** Runs as root; reports `tool=<exit status>` lines, then frees the space and writes again. */
export function floodScript (quotaBytes: number): string {
  const twiceMiB = Math.ceil((2 * quotaBytes) / MIB)
  return `
yes > /big; echo "yes=$?"
dd if=/dev/zero of=/dd bs=1M count=${twiceMiB} status=none; echo "dd=$?"
fallocate -l ${twiceMiB}M /fa; echo "fallocate=$?"
rm -f /big /dd /fa
python3 -c '
import errno, os
n = 0
try:
    os.mkdir("/inodes")
    while n < ${INODE_FLOOD_MAX}:
        open("/inodes/%d" % n, "w").close()
        n += 1
    print("inodes=none")
except OSError as e:
    print("inodes=" + errno.errorcode[e.errno])
'
rm -rf /inodes
echo freed > /after && cat /after`
}

/** Every flood stopped with ENOSPC, the error was reported cleanly, and deleting freed the space. */
export function checkFlood (t: Test, r: ExecResult, boundMs = FLOOD_BOUND_MS): void {
  const out = r.stdout.toString()
  t.equal(r.timedOut, false, `the flood ended by itself within ${boundMs} ms (took ${Math.round(r.durationMs)} ms)`)
  const steps = Object.fromEntries([...out.matchAll(/^(\w+)=(\w+)$/gm)].map(m => [m[1]!, m[2]!]))
  t.same(steps, { yes: '1', dd: '1', fallocate: '1', inodes: 'ENOSPC' }, `yes, dd, fallocate and an inode flood each stop with an error: ${describe(r)}`)
  const enospc = r.stderr.toString().match(/No space left on device/g)?.length ?? 0
  t.ok(enospc >= 3, `… which says "No space left on device" (${enospc} times on stderr)`)
  t.match(out, /^freed$/m, 'after deleting, the sandbox writes again')
}

const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

/** The whole attack on one Linux tier. */
export async function diskFloodAttack (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const quota = ATTACK_LIMITS.diskBytes
  const attacker = await node.sandbox(t, tier, { diskBytes: quota })
  const neighbour = await node.sandbox(t, tier, { diskBytes: quota })
  const mount = node.imageMount(attacker)
  const before = await takeBaseline(node)
  // A file the image mount has not served yet in this run: the host reads it mid-flood.
  const probe = 'usr/lib/python3.11/email/message.py'
  const [flood, neighbourResult, hostRead] = await Promise.all([
    sh(attacker, floodScript(quota), { timeoutMs: FLOOD_BOUND_MS, user: 'root' }),
    neighbourWrites(neighbour),
    (async () => { await new Promise(resolve => setTimeout(resolve, 200)); return await readFile(join(mount, probe)) })()
  ])
  checkFlood(t, flood)
  t.equal(neighbourResult.exitCode, 0, `another sandbox wrote and read 16 MiB meanwhile: ${describe(neighbourResult)}`)
  t.match(neighbourResult.stdout.toString(), /^match$/m, 'its data came back intact')
  t.equal(sha256(hostRead), sha256(await readFile(join(node.fixtureRootfs, probe))), 'layerd served a new file through the mount during the flood')
  await assertContained(t, node, before, { mounts: [mount], sandboxes: [{ stateDir: attacker.stateDir, diskBytes: quota }, { stateDir: neighbour.stateDir, diskBytes: quota }] })
}

async function neighbourWrites (sb: ManagedSandbox): Promise<ExecResult> {
  return await sh(sb, 'head -c 16M /dev/urandom > /tmp/mine && a=$(sha256sum < /tmp/mine) && sleep 1 && b=$(sha256sum < /tmp/mine) && [ "$a" = "$b" ] && echo match', { timeoutMs: FLOOD_BOUND_MS })
}
