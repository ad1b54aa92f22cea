/**
 * Behaviour every Linux tier (process, container with runc or crun) must
 * show, as one tap suite run against each driver by its test file, on the
 * real Debian fixture images with real mounts, cgroups and runtimes. Each
 * test destroys its sandboxes in teardown and checks nothing is left.
 *
 * May import: src/, fixtures/, tap.
 */
import { createHash } from 'node:crypto'
import { access, readFile, readdir, statfs } from 'node:fs/promises'
import { join } from 'node:path'
import type { Test } from 'tap'
import { ensureDebianImages, type DebianImages } from '../../fixtures/debian-images.js'
import { allocatedBytes, HOST_NOISE_BYTES, STATE_OVERHEAD_BYTES } from '../attacks/containment.js'
import type { OciImageConfig } from '../format/manifest.js'
import { mountsUnder } from '../host/mount-table.js'
import { DEFAULT_LIMITS, type Sandbox, type SandboxLimits, type TierDriver } from './sandbox.js'

const MIB = 1024 ** 2
const exists = async (p: string): Promise<boolean> => await access(p).then(() => true, () => false)
const sha256 = async (p: string): Promise<string> => createHash('sha256').update(await readFile(p)).digest('hex')

export interface TierSuiteOptions {
  /** Run only the basic checks (used for a second runtime of the same tier). */
  short?: boolean
}

/** Register the suite's subtests on `t`. Async (loads the fixture images first). */
export async function tierSuite (t: Test, driver: TierDriver, opts: TierSuiteOptions = {}): Promise<void> {
  const why = await driver.unavailableReason()
  if (why !== undefined) {
    t.test(`${driver.tier} tier`, { skip: `unavailable here: ${why}` }, async () => {})
    return
  }
  const images: DebianImages = await ensureDebianImages()
  const base = images.images.base.rootfs
  const python = images.images['python-v1'].rootfs
  const root = t.testdir({})
  let n = 0

  const create = async (tt: Test, rootfs: string, config: OciImageConfig = {}, limits: Partial<SandboxLimits> = {}): Promise<Sandbox & { stateDir: string, id: string }> => {
    const id = `t${process.pid}-${driver.tier}-${++n}`
    const stateDir = join(root, id)
    const sb = await driver.create({ id, imageName: 'fixture', config, rootfs, stateDir, limits: { ...DEFAULT_LIMITS, diskBytes: 256 * MIB, ...limits } })
    tt.teardown(async () => { await sb.destroy() }) // idempotent: tests that destroy themselves check the result
    return Object.assign(sb, { stateDir, id })
  }
  const run = async (sb: Sandbox, script: string, extra: { timeoutMs?: number, user?: string } = {}): ReturnType<Sandbox['exec']> =>
    await sb.exec({ cmd: ['sh', '-c', script], ...extra })

  t.test(`${driver.tier}: exec() prints the image's /etc/os-release and runs python3`, async t => {
    const sb = await create(t, base)
    const r = await sb.exec({ cmd: ['cat', '/etc/os-release'] })
    t.equal(r.exitCode, 0)
    t.equal(r.stdout.toString(), await readFile(join(base, 'etc/os-release'), 'utf8'))
    const py = await create(t, python)
    const p = await py.exec({ cmd: ['python3', '-c', 'print(2+2)'] })
    t.equal(p.stdout.toString(), '4\n')
    t.equal(p.exitCode, 0)
  })

  t.test(`${driver.tier}: destroy() kills what runs and removes mounts, cgroup and state`, async t => {
    const sb = await create(t, base)
    const running = run(sb, 'sleep 60')
    await new Promise(resolve => setTimeout(resolve, 300))
    await sb.destroy()
    const r = await running
    t.not(r.exitCode, 0, 'the running command was killed')
    t.same(await mountsUnder(sb.stateDir), [], 'no mounts left')
    t.notOk(await exists(sb.stateDir), 'state dir removed')
    t.notOk(await exists(`/sys/fs/cgroup/pids/layerd/${sb.id}`), 'pids cgroup removed')
    t.notOk(await exists(`/sys/fs/cgroup/memory/layerd/${sb.id}`), 'memory cgroup removed')
    await sb.destroy()
    await t.rejects(sb.exec({ cmd: ['true'] }), { code: 'ERR_USAGE' }, 'exec after destroy is refused')
  })

  t.test(`${driver.tier}: exec() returns stdout, stderr and a non-zero exit code unchanged`, async t => {
    const sb = await create(t, base)
    const r = await run(sb, 'printf "a\\000b"; printf oops >&2; exit 7')
    t.equal(r.exitCode, 7)
    t.same([...r.stdout], [0x61, 0, 0x62])
    t.equal(r.stderr.toString(), 'oops')
    t.equal(r.timedOut, false)
    const echo = await sb.exec({ cmd: ['cat'], stdin: Buffer.from('from stdin') })
    t.equal(echo.stdout.toString(), 'from stdin')
  })

  t.test(`${driver.tier}: the image config's Env, WorkingDir and User apply, and exec options override them`, async t => {
    const sb = await create(t, base, { config: { Env: ['GREETING=hi', 'PATH=/usr/bin:/bin'], WorkingDir: '/srv/app', User: 'daemon' } })
    const r = await run(sb, 'echo "$GREETING|$PATH|$HOME"; pwd; id -u; id -g; touch /tmp/mine; stat -c %u:%g /tmp/mine')
    t.equal(r.stdout.toString(), 'hi|/usr/bin:/bin|/usr/sbin\n/srv/app\n1\n1\n1:1\n', r.stderr.toString())
    const o = await sb.exec({ cmd: ['sh', '-c', 'echo $GREETING; pwd; id -u'], env: ['GREETING=over'], cwd: '/tmp', user: 'root' })
    t.equal(o.stdout.toString(), 'over\n/tmp\n0\n')
    const bad = sb.exec({ cmd: ['true'], user: 'no-such-user' })
    await t.rejects(bad, { code: 'ERR_USAGE' })
  })

  t.test(`${driver.tier}: writes stay in the sandbox: the image and a second sandbox are unchanged`, async t => {
    const lsDigest = await sha256(join(base, 'usr/bin/ls'))
    const a = await create(t, base)
    const w = await run(a, 'rm /bin/ls && echo evil > /etc/x && echo pwned > /bin/sh.txt && ls 2>&1; cat /etc/x')
    t.match(w.stdout.toString(), /evil/)
    t.notOk(await exists(join(base, 'etc/x')), 'the image has no /etc/x')
    t.equal(await sha256(join(base, 'usr/bin/ls')), lsDigest, 'the image\'s ls is intact')
    const b = await create(t, base)
    const r = await run(b, 'test -e /etc/x && echo has-x; ls /bin/ls')
    t.equal(r.stdout.toString(), '/bin/ls\n')
    t.equal(r.exitCode, 0)
    const again = await run(a, 'test -e /bin/ls || echo gone; cat /etc/x')
    t.equal(again.stdout.toString(), 'gone\nevil\n', 'files persist between execs of one sandbox')
  })

  if (opts.short !== true) {
    t.test(`${driver.tier}: a disk flood stops with ENOSPC at the quota and the host is unaffected`, async t => {
      const quota = 64 * MIB
      const sb = await create(t, base, {}, { diskBytes: quota })
      const before = await statfs(root)
      const y = await run(sb, 'yes > /big; echo "yes=$?"; dd if=/dev/zero of=/dd bs=1M count=200 2>&1; fallocate -l 100M /fa 2>&1; echo done', { timeoutMs: 60_000 })
      const out = y.stdout.toString()
      t.equal(y.timedOut, false)
      t.match(out, /No space left on device/)
      t.match(out, /yes=1/)
      t.match(out, /done/)
      // The writes landed in the sandbox's own quota'd disk: what its state takes on the host is within the quota.
      const used = await allocatedBytes(sb.stateDir)
      t.ok(used <= quota + STATE_OVERHEAD_BYTES, `the sandbox's state takes ${(used / MIB).toFixed(1)} MiB on the host, within the ${quota / MIB} MiB quota + overhead`)
      // And nothing escaped it. Other test files write to this disk meanwhile, so the host-wide figure gets a
      // wide margin: an uncontained `yes` would have filled the disk, far beyond it.
      const after = await statfs(root)
      const hostUsed = (before.bavail - after.bavail) * before.bsize
      t.ok(hostUsed < quota + HOST_NOISE_BYTES, `host free space fell by ${(hostUsed / MIB).toFixed(1)} MiB (bound: the quota + ${HOST_NOISE_BYTES / MIB} MiB for other jobs)`)
      const other = await create(t, base)
      t.equal((await run(other, 'echo ok > /tmp/ok && cat /tmp/ok')).stdout.toString(), 'ok\n', 'another sandbox still writes')
      t.equal((await run(sb, 'rm /big /dd; echo freed > /tmp/f && cat /tmp/f')).stdout.toString(), 'freed\n', 'deleting frees the quota')
    })

    t.test(`${driver.tier}: mount, FS_IOC_SETFLAGS and new user namespaces are refused with EPERM`, async t => {
      const sb = await create(t, base)
      const r = await run(sb, 'mount -t tmpfs none /mnt 2>&1; echo "mount=$?"; touch /tmp/f; chattr +d /tmp/f 2>&1; echo "chattr=$?"; unshare -U true 2>&1; echo "unshare=$?"')
      const out = r.stdout.toString()
      t.match(out, /mount=(?!0)\d+/)
      t.match(out, /chattr: Operation not permitted while setting flags/)
      t.match(out, /unshare: unshare failed: Operation not permitted/)
      t.notMatch(out, /unshare=0/)
    })

    t.test(`${driver.tier}: the sandbox sees none of the host's filesystem or processes`, async t => {
      const sb = await create(t, base)
      const r = await run(sb, 'for p in /work /var/lib/layerd /var/cache/layerd-fixtures /run/layerd /home/node; do test -e $p && echo "seen $p"; done; ls /proc | grep -c "^[0-9]"')
      const out = r.stdout.toString()
      t.notMatch(out, /seen/, 'no host path is visible')
      const pids = Number(out.trim())
      t.ok(pids > 0 && pids < 10, `only the sandbox's own processes in /proc (${pids})`)
      const init = (await sb.exec({ cmd: ['cat', '/proc/1/cmdline', '/proc/self/mountinfo'] })).stdout.toString()
      t.notMatch(init, /systemd|\/sbin\/init/, 'pid 1 is the sandbox\'s own')
      t.notOk(init.includes(root), 'no host path shows through /proc (pid 1\'s command line, the mount table)')
      t.notOk((await readdir(root)).includes('escape'), 'nothing written outside')
    })

    t.test(`${driver.tier}: pids and memory limits stop a fork bomb and a memory hog, and a timeout kills the whole tree`, async t => {
      const sb = await create(t, base, {}, { pids: 24 })
      const bounded = await run(sb, 'i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; echo started', { timeoutMs: 30_000 })
      t.equal(bounded.timedOut, false)
      t.match(bounded.stderr.toString(), /fork|Resource temporarily unavailable/i)
      const started = performance.now()
      // exec, not a child: with the pids limit reached, the shell could not fork a sleep and would end before the timeout.
      // The bomb starts in a subshell: a shell whose own fork fails exits, and the top shell must live to exec the sleep.
      const bomb = await run(sb, '(b() { b | b & }; b); exec sleep 60', { timeoutMs: 2000 })
      t.equal(bomb.timedOut, true)
      t.ok(performance.now() - started < 15_000, 'the bomb is killed within the bound')
      const hog = await create(t, base, {}, { memoryBytes: 96 * MIB })
      // tail keeps a newline-free stream in memory: 600 MiB against a 96 MiB limit.
      const m = await run(hog, 'head -c 600M /dev/zero | tail -n 1 > /dev/null; echo "rc=$?"', { timeoutMs: 60_000 })
      t.equal(m.timedOut, false)
      t.match(m.stdout.toString(), /rc=(137|1)/, 'the memory hog is killed by the memory limit')
      const after = await run(sb, 'echo alive', { timeoutMs: 10_000 })
      t.equal(after.stdout.toString(), 'alive\n', 'the sandbox works after the bomb is gone')
    })
  }
}
