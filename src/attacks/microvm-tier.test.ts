/**
 * Attacks 1 (overwrites), 2 (disk floods) and 4 (/proc storms) in the
 * microvm tier, in two boots (vm-batch.ts). Skipped, with the reason, where
 * the tier cannot run (no QEMU, or a guest kernel that cannot be had). The
 * guest kernel fixture is fetched first, as the other VM tests do: without
 * it a fresh machine (CI) would skip these attacks.
 */
import t from 'tap'
import { ensureGuestKernel } from '../../fixtures/guest-kernel.js'
import { forEachTier, shutdownTest, startAttackNode } from './attack-harness.js'
import { vmAttackBatch } from './vm-batch.js'

await ensureGuestKernel()
const node = await startAttackNode(t)

await forEachTier(t, ['microvm'], 'overwrites, a disk flood and a /proc storm in one attacker VM leave the image, a fresh VM and the host intact', async (t, tier) => {
  await vmAttackBatch(t, node, tier)
})

shutdownTest(t, node)
