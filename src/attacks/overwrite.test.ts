/**
 * Attack 1 (issue 6): overwriting /bin/sh, python3 and libc inside a
 * sandbox leaves the image, its mount, the store and the next sandbox intact.
 * The VM tiers run the same steps in vm-tiers.test.ts (batched boots).
 */
import t from 'tap'
import { ATTACK_IMAGE, LINUX_TIERS, forEachTier, shutdownTest, startAttackNode } from './attack-harness.js'
import { checkMountEqualsFixture, overwriteAttack } from './overwrite.js'

const node = await startAttackNode(t)

await forEachTier(t, LINUX_TIERS, 'overwriting the shell, python3 and libc changes only the attacker\'s own layer', async (t, tier) => {
  await overwriteAttack(t, node, tier)
})

t.test(`after every tier's attack, layerd's mount of ${ATTACK_IMAGE} equals the fixture's tree entry for entry`, async t => {
  const mounts = JSON.parse((await node.layerd.layerctl('mounts', '--json')).stdout) as Array<{ mountpoint: string, manifest: string }>
  t.equal(mounts.length, 1, 'one shared mount of the image')
  await checkMountEqualsFixture(t, mounts[0]!.mountpoint, node.fixtureRootfs)
})

shutdownTest(t, node)
