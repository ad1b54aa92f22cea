/**
 * Attack 4 (issue 6): recursive and concurrent reads of /proc and /sys are
 * bounded, see only the sandbox's own processes, cannot write host sysctls,
 * and the host (its /proc, its sysctls, layerd) stays up. The VM tiers run
 * the same storm in vm-tiers.test.ts.
 */
import t from 'tap'
import { LINUX_TIERS, forEachTier, shutdownTest, startAttackNode } from './attack-harness.js'
import { procStormAttack } from './proc-storm.js'

const node = await startAttackNode(t)

await forEachTier(t, LINUX_TIERS, 'two /proc and /sys storms (one following /proc/*/root endlessly) end within the bound and touch nothing of the host', async (t, tier) => {
  await procStormAttack(t, node, tier)
})

shutdownTest(t, node)
