/**
 * Attack 3 (issue 6): ioctls, xattrs, mknod, O_DIRECT and mmap writes
 * against image files, from inside each Linux tier and from host root on
 * layerd's mount: refused (EPERM, EROFS, ENOTTY, EOPNOTSUPP, EACCES) or
 * confined to the sandbox's own copy; the mount and the store unchanged.
 */
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { ATTACK_IMAGE, ATTACK_LIMITS, LINUX_TIERS, describe, forEachTier, jsonReport, python, shutdownTest, startAttackNode } from './attack-harness.js'
import { assertContained, sha256File, takeBaseline } from './containment.js'
import { EXPECTED_IN_SANDBOX, EXPECTED_ON_HOST_MOUNT, LOW_LEVEL_PROGRAM, TARGET_FILES, reportDifferences, runOnHostMount, targetXattrs } from './low-level-calls.js'

const node = await startAttackNode(t)
const fixtureXattrs = await targetXattrs(node.fixtureRootfs)

async function assertMountUnchanged (t: Test, mountpoint: string): Promise<void> {
  const changed: string[] = []
  for (const f of TARGET_FILES) if (await sha256File(join(mountpoint, f)) !== await sha256File(join(node.fixtureRootfs, f))) changed.push(f)
  t.same(changed, [], `the mount serves the fixture's bytes for all ${TARGET_FILES.length} target files`)
  t.same(await targetXattrs(mountpoint), fixtureXattrs, 'and the fixture\'s xattrs (none added)')
}

await forEachTier(t, LINUX_TIERS, 'ioctls, xattrs, mknod, O_DIRECT and mmap writes are refused or stay in the sandbox\'s copy', async (t, tier) => {
  const sb = await node.sandbox(t, tier)
  const before = await takeBaseline(node)
  const r = await python(sb, LOW_LEVEL_PROGRAM, { args: ['sandbox'], user: 'root', timeoutMs: 60_000 })
  t.equal(r.exitCode, 0, describe(r))
  t.same(reportDifferences(jsonReport(r), EXPECTED_IN_SANDBOX), [], `every call got its expected answer (${Object.keys(EXPECTED_IN_SANDBOX).length} calls)`)
  const own = await python(sb, 'import os; print(os.getxattr("/usr/bin/python3.11", "user.evil"), open("/usr/bin/tail", "rb").read(4), open("/usr/bin/env", "rb").read(4))')
  t.equal(own.stdout.toString(), "b'1' b'EVIL' b'EVIL'\n", 'the allowed writes landed in the sandbox\'s own copies')
  const fresh = await node.sandbox(t, tier)
  // The image has no xattrs at all, so its files answer listxattr with ENOTSUP (an empty list would do as well).
  const clean = await python(fresh, `import errno, os
try:
    x = os.getxattr("/usr/bin/python3.11", "user.evil")
except OSError as e:
    x = errno.errorcode[e.errno]
print(x, open("/usr/bin/tail", "rb").read(4), open("/usr/bin/env", "rb").read(4))`)
  t.match(clean.stdout.toString(), /^(ENOTSUP|ENODATA) b'\\x7fELF' b'\\x7fELF'\n$/, `a new sandbox sees none of them: ${describe(clean)}`)
  await assertMountUnchanged(t, node.imageMount(sb))
  await assertContained(t, node, before, { mounts: [node.imageMount(sb)], sandboxes: [{ stateDir: sb.stateDir, diskBytes: ATTACK_LIMITS.diskBytes }] })
})

t.test('host root\'s low-level calls on layerd\'s mount are refused by the read-only FUSE mount', async t => {
  const mountpoint = join(node.home, 'host-mount')
  const m = await node.layerd.layerctl('mount', ATTACK_IMAGE, mountpoint)
  t.equal(m.code, 0, m.stderr)
  t.teardown(async () => { await node.layerd.layerctl('umount', mountpoint) })
  const before = await takeBaseline(node)
  const r = await runOnHostMount(mountpoint)
  t.equal(r.exitCode, 0, describe(r))
  t.same(reportDifferences(jsonReport(r), EXPECTED_ON_HOST_MOUNT), [], `every call got its expected answer (${Object.keys(EXPECTED_ON_HOST_MOUNT).length} calls)`)
  await assertMountUnchanged(t, mountpoint)
  await assertContained(t, node, before, { mounts: [mountpoint] })
})

shutdownTest(t, node)
