/**
 * Attack 2 (issue 6): disk floods stop with ENOSPC at the sandbox's quota;
 * the host, other sandboxes and layerd are unaffected. The VM tiers run
 * the same flood in vm-tiers.test.ts.
 */
import t from 'tap'
import { LINUX_TIERS, forEachTier, shutdownTest, startAttackNode } from './attack-harness.js'
import { diskFloodAttack } from './disk-flood.js'

const node = await startAttackNode(t)

await forEachTier(t, LINUX_TIERS, '`yes`, dd, fallocate and an inode flood stop with ENOSPC at the quota; neighbours and layerd carry on', async (t, tier) => {
  await diskFloodAttack(t, node, tier)
})

shutdownTest(t, node)
