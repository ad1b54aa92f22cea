/**
 * Attack 1: overwrite the shell, python and libc inside a sandbox (the
 * agents in the paper overwrote /bin/sh). Root inside may change its own
 * root file system: the writes succeed, in the sandbox's own writable
 * layer. What must hold: a new sandbox from the same image is intact, and
 * layerd's mount of the image still serves the fixture's bytes (the target
 * files after each attack; the whole tree, entry for entry, once at the end
 * of the test file).
 *
 * The steps are exported separately so the VM tiers can run them inside
 * one attacker VM and one fresh VM (few boots).
 *
 * May import: ./attack-harness.ts, ./containment.ts, src/, fixtures/, tap (types).
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Test } from 'tap'
import { compareTrees, snapshotTree, type TreeSnapshot } from '../../fixtures/tree-compare.js'
import type { ExecResult, Tier } from '../runtime/sandbox.js'
import type { ManagedSandbox } from '../sandbox/create-sandbox.js'
import { ATTACK_LIMITS, describe, sh, type AttackNode } from './attack-harness.js'
import { assertContained, sha256File, takeBaseline } from './containment.js'

/** Each overwrite reports `name=<exit status>`; bash runs it (dash is a target, and a running binary cannot be written). */
export const OVERWRITE_SCRIPT = `
printf '#!/bin/false\\nevil shell\\n' > /bin/sh; echo "sh=$?"
cp /usr/bin/true /usr/bin/python3; echo "python3=$?"
chmod 000 /usr/bin/env; echo "chmod=$?"
rm -rf /usr/lib/python3.11/json; echo "rm=$?"
ln -sf /tmp/nothing /usr/bin/ls; echo "symlink=$?"
sha256sum /usr/bin/dash /usr/bin/python3.11 | sed 's/^/after /'
dd if=/dev/urandom of=/usr/lib/x86_64-linux-gnu/libc.so.6 bs=4096 count=4 conv=notrunc 2>/dev/null; echo "libc=$?"
`

/** Run the overwrites as root. The attacker's later commands need libc: run this last in a sandbox. */
export async function runOverwrites (sb: ManagedSandbox): Promise<ExecResult> {
  return await sb.exec({ cmd: ['/usr/bin/bash', '-c', OVERWRITE_SCRIPT], user: 'root', timeoutMs: 60_000 })
}

/** The overwrites succeeded inside the attacker's own layer. */
export function checkOverwritesLanded (t: Test, r: ExecResult, fixtureDigests: Record<string, string>): void {
  const out = r.stdout.toString()
  const steps = Object.fromEntries([...out.matchAll(/^(\w+)=(\d+)$/gm)].map(m => [m[1]!, Number(m[2])]))
  t.same(steps, { sh: 0, python3: 0, chmod: 0, rm: 0, symlink: 0, libc: 0 }, `inside, every overwrite succeeded (root may change its own layer): ${describe(r)}`)
  const after = new Map([...out.matchAll(/^after ([0-9a-f]{64}) {2}(\S+)$/gm)].map(m => [m[2]!, m[1]!]))
  t.not(after.get('/usr/bin/dash'), fixtureDigests['usr/bin/dash'], 'inside, the shell was changed')
  t.not(after.get('/usr/bin/python3.11'), fixtureDigests['usr/bin/python3.11'], 'inside, python was changed')
}

export const INTACT_SCRIPT = `sha256sum /usr/bin/dash /usr/bin/python3.11 /usr/lib/x86_64-linux-gnu/libc.so.6
stat -c 'env mode %a' /usr/bin/env
test -L /usr/bin/ls && echo 'ls is a symlink' || echo 'ls is a file'
python3 -c 'import json; print("python", json.dumps(2+2))'`

/** A sandbox made after the attack sees the image's files. */
export async function checkIntact (t: Test, sb: ManagedSandbox, fixtureDigests: Record<string, string>): Promise<void> {
  const r = await sh(sb, INTACT_SCRIPT, { timeoutMs: 60_000 })
  const out = r.stdout.toString()
  t.equal(r.exitCode, 0, describe(r))
  for (const f of ['usr/bin/dash', 'usr/bin/python3.11', 'usr/lib/x86_64-linux-gnu/libc.so.6']) {
    t.match(out, `${fixtureDigests[f]}  /${f}`, `a new sandbox has the image's /${f}`)
  }
  t.match(out, 'env mode 755')
  t.match(out, 'ls is a file')
  t.match(out, 'python 4', 'python3 and its json module work in the new sandbox')
}

/** sha256 of the files the attack targets, from the fixture's tree. */
export async function fixtureDigests (rootfs: string): Promise<Record<string, string>> {
  const files = ['usr/bin/dash', 'usr/bin/python3.11', 'usr/lib/x86_64-linux-gnu/libc.so.6']
  return Object.fromEntries(await Promise.all(files.map(async f => [f, await sha256File(join(rootfs, f))])))
}

let fixtureTree: Promise<TreeSnapshot> | undefined

/** The mount equals the fixture's tree, entry for entry (type, mode, owner, size, sha256, targets, xattrs). */
export async function checkMountEqualsFixture (t: Test, mountpoint: string, rootfs: string): Promise<void> {
  fixtureTree ??= snapshotTree(rootfs)
  const [want, got] = await Promise.all([fixtureTree, snapshotTree(mountpoint)])
  t.same(compareTrees(want, got, { skip: p => p === '', labels: ['fixture', 'mount'] }), [], `layerd's mount still equals the fixture: ${got.size} entries compared`)
}

/** The whole attack on one Linux tier: attacker, a fresh sandbox, the mount, the store. */
export async function overwriteAttack (t: Test, node: AttackNode, tier: Tier): Promise<void> {
  const digests = await fixtureDigests(node.fixtureRootfs)
  const attacker = await node.sandbox(t, tier)
  const before = await takeBaseline(node)
  const r = await runOverwrites(attacker)
  checkOverwritesLanded(t, r, digests)
  if (attacker.upperDir !== undefined) {
    t.match(await readFile(join(attacker.upperDir, 'usr/bin/dash'), 'utf8'), /evil shell/, 'the overwritten shell is in the attacker\'s upper dir')
  }
  const broken = await sh(attacker, 'true', { timeoutMs: 30_000 })
  t.not(broken.exitCode, 0, 'the attacker broke only itself: its own shell no longer runs')
  const fresh = await node.sandbox(t, tier)
  await checkIntact(t, fresh, digests)
  await assertContained(t, node, before, { mounts: [node.imageMount(fresh)], sandboxes: [{ stateDir: attacker.stateDir, diskBytes: ATTACK_LIMITS.diskBytes }] })
}
