/**
 * Attack 6 (issue 6): a sandbox cannot see layerd's socket, the cache, the
 * store, the image mount, other sandboxes or host paths, by any path
 * trick, and cannot reach host sockets, trace or signal host processes.
 */
import t from 'tap'
import { LINUX_TIERS, forEachTier, shutdownTest, startAttackNode } from './attack-harness.js'
import { reachOutAttack } from './reach-out.js'

const node = await startAttackNode(t)

await forEachTier(t, LINUX_TIERS, 'host paths, other sandboxes, host sockets and processes are out of reach', async (t, tier) => {
  await reachOutAttack(t, node, tier)
})

shutdownTest(t, node)
