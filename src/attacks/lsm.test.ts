/**
 * The container tier's story on this kernel (issue 6): AppArmor is not
 * built in, so layerd generates and requests no AppArmor profile; the
 * confinement that can be tested is seccomp (filter mode, no_new_privs) and
 * the capability sets, in both Linux tiers.
 */
import t from 'tap'
import { access } from 'node:fs/promises'
import { ociRuntimeConfig } from '../runtime/container/oci-config.js'
import { LINUX_TIERS, describe, forEachTier, sh, shutdownTest, startAttackNode } from './attack-harness.js'

const exists = async (p: string): Promise<boolean> => await access(p).then(() => true, () => false)

t.test('AppArmor: not enabled on this kernel, and no profile is requested by the container config', async t => {
  const apparmor = await exists('/sys/module/apparmor') || await exists('/sys/kernel/security/apparmor')
  t.comment(`AppArmor on this host: ${apparmor ? 'enabled' : 'not enabled (no /sys/module/apparmor, no securityfs apparmor/)'}`)
  const config = ociRuntimeConfig({
    ctx: { argv: ['true'], env: [], cwd: '/', user: { uid: 0, gid: 0, additionalGids: [], home: '/root' } },
    rootPath: '/nonexistent', hostname: 'sandbox', pids: 64, memoryBytes: 64 * 1024 ** 2, cgroupsPath: '/layerd/x/e1', devShmBytes: 1024 ** 2, nofileHardLimit: 1024
  }) as { process: Record<string, unknown>, linux: Record<string, unknown> }
  t.equal(config.process.apparmorProfile, undefined, 'config.json asks for no AppArmor profile (none is generated)')
  t.equal(config.process.selinuxLabel, undefined, 'nor an SELinux label')
  t.ok(config.linux.seccomp !== undefined && config.process.noNewPrivileges === true, 'it does ask for the seccomp profile and no_new_privs')
})

const node = await startAttackNode(t)

await forEachTier(t, LINUX_TIERS, 'every sandboxed process runs under a seccomp filter with no_new_privs, and no LSM label', async (t, tier) => {
  const sb = await node.sandbox(t, tier)
  const r = await sh(sb, 'grep -E "^(Seccomp|NoNewPrivs):" /proc/self/status; cat /proc/self/attr/apparmor/current 2>&1 | head -n 1')
  const out = r.stdout.toString()
  t.match(out, /^Seccomp:\s+2$/m, `seccomp filter mode: ${describe(r)}`)
  t.match(out, /^NoNewPrivs:\s+1$/m, 'no_new_privs')
  t.match(out, /No such file or directory|unconfined/, 'no AppArmor confinement exists to rely on (the kernel has none)')
})

shutdownTest(t, node)
