/**
 * Attacks 1, 2 and 4 in a VM tier, batched to two boots (each ~10 s under
 * TCG): one attacker VM runs the /proc storm, then the disk flood, then the
 * overwrites (last: a broken libc ends its usefulness); one fresh VM from
 * the same image then checks the image is intact and writes its own files.
 * In a VM the guest kernel is the boundary: its /proc, /sys and sysctls are
 * its own, its disk is a copy-on-write overlay of the quota's size over the
 * shared, read-only block view, whose sha256 must not change.
 *
 * May import: ./attack-harness.ts, ./containment.ts, the attack modules, src/, tap (types).
 */
import { access } from 'node:fs/promises'
import { join } from 'node:path'
import type { Test } from 'tap'
import { BLOCK_VIEW_FILE } from '../blockview/push-block-view.js'
import type { Tier } from '../runtime/sandbox.js'
import { ATTACK_LIMITS, describe, sh, type AttackNode } from './attack-harness.js'
import { assertContained, sha256Stream, takeBaseline } from './containment.js'
import { checkFlood, floodScript } from './disk-flood.js'
import { checkIntact, checkOverwritesLanded, fixtureDigests, runOverwrites } from './overwrite.js'
import { checkStorm, hostSysctls, runStorm } from './proc-storm.js'

/** Under TCG a guest runs an order of magnitude slower than the host. */
export const VM_FLOOD_BOUND_MS = 240_000

export async function vmAttackBatch (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const digests = await fixtureDigests(node.fixtureRootfs)
  const sysctls = await hostSysctls()
  const attacker = await node.sandbox(t, tier)
  const before = await takeBaseline(node)
  const blockViews = await mountedBlockViews(node)
  t.ok(blockViews.length > 0, `the image's block view is served by layerd: ${blockViews.join(', ')}`)
  const viewDigests = await Promise.all(blockViews.map(sha256Stream))

  const storm = await runStorm(attacker)
  checkStorm(t, storm, tier)
  t.same(await hostSysctls(), sysctls, 'attack 4: the host\'s sysctls are unchanged (the guest has its own kernel)')

  const flood = await sh(attacker, floodScript(ATTACK_LIMITS.diskBytes), { timeoutMs: VM_FLOOD_BOUND_MS, user: 'root' })
  checkFlood(t, flood, VM_FLOOD_BOUND_MS)

  checkOverwritesLanded(t, await runOverwrites(attacker), digests)

  const fresh = await node.sandbox(t, tier)
  await checkIntact(t, fresh, digests)
  const mine = await sh(fresh, 'head -c 16M /dev/urandom > /tmp/mine && sha256sum /tmp/mine > /tmp/sum && sha256sum -c /tmp/sum', { timeoutMs: VM_FLOOD_BOUND_MS })
  t.equal(mine.exitCode, 0, `attack 2: another VM writes and reads its own files: ${describe(mine)}`)
  t.same(await Promise.all(blockViews.map(sha256Stream)), viewDigests, 'attack 1: the shared block view the VMs boot from is bit-for-bit unchanged (sha256)')
  await assertContained(t, node, before, { sandboxes: [{ stateDir: attacker.stateDir, diskBytes: ATTACK_LIMITS.diskBytes }] })
}

/** The block view files (`disk.raw`) on layerd's mounts. Async. */
async function mountedBlockViews (node: AttackNode): Promise<string[]> {
  const mounts = JSON.parse((await node.layerd.layerctl('mounts', '--json')).stdout) as Array<{ mountpoint: string }>
  const files = mounts.map(m => join(m.mountpoint, BLOCK_VIEW_FILE))
  return (await Promise.all(files.map(async f => await access(f).then(() => f, () => undefined)))).filter((f): f is string => f !== undefined)
}
