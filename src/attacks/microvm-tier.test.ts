/**
 * Attacks 1 (overwrites), 2 (disk floods) and 4 (/proc storms) in the
 * microvm tier, in two boots (vm-batch.ts). Skipped, with the reason, where
 * the tier cannot run (no guest kernel, no QEMU, or not wired in yet).
 */
import t from 'tap'
import { forEachTier, shutdownTest, startAttackNode } from './attack-harness.js'
import { vmAttackBatch } from './vm-batch.js'

const node = await startAttackNode(t)

await forEachTier(t, ['microvm'], 'overwrites, a disk flood and a /proc storm in one attacker VM leave the image, a fresh VM and the host intact', async (t, tier) => {
  await vmAttackBatch(t, node, tier)
})

shutdownTest(t, node)
