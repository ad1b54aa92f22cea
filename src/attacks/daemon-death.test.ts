/**
 * Attack 7 (issue 6): killing layerd while sandboxes read gives the readers
 * an error within a bound (no hang); layerd comes back and new sandboxes
 * work. Each tier gets its own node, since its daemon is killed.
 */
import t from 'tap'
import { LINUX_TIERS, forEachTier, startAttackNode } from './attack-harness.js'
import { daemonDeathAttack } from './daemon-death.js'
import { mountsUnder } from '../host/mount-table.js'

// Subtests' own test dirs have long names; layerd's socket path must stay under the 108-byte sun_path limit.
const dir = t.testdir()

await forEachTier(t, LINUX_TIERS, 'killing layerd mid-read fails the readers within the bound; layerd comes back for new sandboxes', async (t, tier) => {
  const node = await startAttackNode(t, tier, { dir })
  await daemonDeathAttack(t, node, tier)
  await node.layerd.stopDaemon()
  t.same(await mountsUnder(node.home), [], 'the restarted layerd stops cleanly and leaves nothing mounted')
})
