/**
 * Attack 5 (issue 6): fork bombs, thread bombs and memory hogs are stopped
 * by the sandbox's pids and memory limits within a bound; the host,
 * layerd and the sandbox itself carry on.
 */
import t from 'tap'
import { LINUX_TIERS, forEachTier, shutdownTest, startAttackNode } from './attack-harness.js'
import { forkBombAttack, memoryHogAttack } from './fork-memory.js'

const node = await startAttackNode(t)

await forEachTier(t, LINUX_TIERS, 'a fork bomb and a thread bomb stop at the pids limit and are killed within the bound', async (t, tier) => {
  await forkBombAttack(t, node, tier)
})

await forEachTier(t, LINUX_TIERS, 'a memory hog is OOM-killed at the memory limit and /dev/shm stops at its size', async (t, tier) => {
  await memoryHogAttack(t, node, tier)
})

shutdownTest(t, node)
