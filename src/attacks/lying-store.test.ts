/**
 * Attack 8 (issue 6): a store whose chunks, TOC or manifest were modified
 * after the push. Lying chunks are detected (EIO inside every Linux tier
 * and on the host, counted, never cached, no memory blow-up from a bomb);
 * a lying TOC or manifest makes createSandbox refuse with
 * CorruptObjectError. Each store gets its own node: a warm cache would
 * (correctly) serve verified copies and hide the lie.
 */
import t from 'tap'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ATTACK_IMAGE, LINUX_TIERS, copyPushedStore, describe, forEachTier, sh, shutdownTest, startAttackNode } from './attack-harness.js'
import { assertContained, mountStats, takeBaseline } from './containment.js'
import { BOMB_PLAIN_BYTES, LYING_FILES, corruptObjects, peakRssBytes, plantChunkLie, type ChunkLie } from './lying-store.js'

const dir = t.testdir()
const LIES = Object.keys(LYING_FILES) as ChunkLie[]
const EIO = /Input\/output error|Errno 5/

const chunkStore = join(dir, 'chunk-lies')
await copyPushedStore(chunkStore)
for (const lie of LIES) await plantChunkLie(chunkStore, lie)
const node = await startAttackNode(t, 'chunks', { storeDir: chunkStore, dir })

await forEachTier(t, LINUX_TIERS, 'lying chunks (flipped, plausible, a 256 MiB bomb) give EIO, are counted and never served', async (t, tier) => {
  const sb = await node.sandbox(t, tier)
  const mount = node.imageMount(sb)
  const before = await takeBaseline(node)
  const corruptBefore = (await mountStats(node, mount)).corruptChunks ?? 0
  const rssBefore = await peakRssBytes(before.daemonPid!)
  const paths = LIES.map(l => `/${LYING_FILES[l]}`).join(' ')
  const r = await sh(sb, `for f in ${paths}; do cat $f > /dev/null; echo "$f=$?"; done; for f in ${paths}; do cat $f > /dev/null 2>&1; echo "again $f=$?"; done; cat /etc/os-release > /dev/null; echo "clean=$?"`, { timeoutMs: 60_000 })
  const out = r.stdout.toString()
  for (const lie of LIES) {
    t.match(out, new RegExp(`^/${LYING_FILES[lie]}=1$`, 'm'), `${lie}: reading /${LYING_FILES[lie]} fails`)
    t.match(out, new RegExp(`^again /${LYING_FILES[lie]}=1$`, 'm'), `${lie}: and fails again (the lie was not cached)`)
  }
  t.equal((r.stderr.toString().match(/Input\/output error/g) ?? []).length, LIES.length, `each with EIO: ${describe(r)}`)
  t.match(out, /^clean=0$/m, 'files with honest chunks still read')
  // The image has compiled .pyc files, so `import json` never reads the .py; reading the source does.
  const py = await sh(sb, 'python3 -c "import json.decoder; open(json.decoder.__file__).read()"', { timeoutMs: 60_000 })
  t.not(py.exitCode, 0, 'python3 cannot read the lying json source…')
  t.match(py.stderr.toString(), EIO, `… and says why: ${describe(py)}`)
  const host = await readFile(join(mount, LYING_FILES.plausible)).then(() => 'served', (err: NodeJS.ErrnoException) => err.code)
  t.equal(host, 'EIO', 'the host reading the plausible lie through the mount gets EIO too')
  const stats = await mountStats(node, mount)
  t.ok(stats.corruptChunks! - corruptBefore >= LIES.length, `the mount counted ${stats.corruptChunks! - corruptBefore} corrupt chunks`)
  const rssGrowth = await peakRssBytes(before.daemonPid!) - rssBefore
  t.ok(rssGrowth < BOMB_PLAIN_BYTES / 4, `layerd's peak memory grew by ${(rssGrowth / 1024 ** 2).toFixed(1)} MiB: the bomb was never inflated`)
  await assertContained(t, node, before) // the lying store itself is unchanged, and layerd serves on
})

shutdownTest(t, node)

for (const object of ['layers', 'manifests'] as const) {
  const storeDir = join(dir, `lying-${object}`)
  await copyPushedStore(storeDir)
  const changed = await corruptObjects(storeDir, object)
  await forEachTier(t, LINUX_TIERS, `a lying ${object === 'layers' ? 'layer TOC' : 'manifest'} makes createSandbox refuse the image, naming the object`, async (t, tier) => {
    const node = await startAttackNode(t, `${object}-${tier}`, { storeDir, dir })
    const before = await takeBaseline(node)
    const started = performance.now()
    await t.rejects(node.sandbox(t, tier), { code: 'ERR_CORRUPT_OBJECT', message: new RegExp(`${object}/(${changed.join('|')})`) }, `createSandbox(${ATTACK_IMAGE}) rejects with CorruptObjectError`)
    t.ok(performance.now() - started < 30_000, 'promptly')
    const mounts = JSON.parse((await node.layerd.layerctl('mounts', '--json')).stdout) as unknown[]
    t.same(mounts, [], 'nothing was mounted')
    await assertContained(t, node, before)
  })
}
