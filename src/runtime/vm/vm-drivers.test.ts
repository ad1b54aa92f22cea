/**
 * The microvm and vm tiers on real QEMU (TCG here: KVM is probed and found
 * unusable), Debian's kernel, and the Debian python image's block view
 * served lazily by a real layerd FUSE mount on a cold cache. Each boot costs
 * 5-10 s, so the checks share four VMs.
 */
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { access, copyFile, mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises'
import { dirname, join, relative } from 'node:path'
import { promisify } from 'node:util'
import { ensureDebianImages } from '../../../fixtures/debian-images.js'
import { ensureGuestKernel } from '../../../fixtures/guest-kernel.js'
import { layerdNode } from '../../../fixtures/layerd-harness.js'
import { buildBlockView } from '../../blockview/block-view-builder.js'
import { pushBlockViewImage } from '../../blockview/block-view-image.js'
import { BLOCK_VIEW_FILE } from '../../blockview/push-block-view.js'
import type { OciImageConfig } from '../../format/manifest.js'
import { parseRef } from '../../format/ref.js'
import { openMemoryNodeDb } from '../../state/node-db.js'
import { openStore } from '../../store/open-store.js'
import { DEFAULT_LIMITS, type SandboxLimits } from '../sandbox.js'
import { findImageKernel } from './image-kernel.js'
import { readModinfo, resolveGuestModules } from './kernel-modules.js'
import { CONSOLE_FILE_BYTES } from './console-sink.js'
import { MicrovmTierDriver, VmTierDriver } from './vm-drivers.js'
import type { VmSandbox } from './vm-sandbox.js'

const run = promisify(execFile)
const MIB = 1024 ** 2
const describeResult = (r: { exitCode: number, stdout: Buffer, stderr: Buffer }): string => `exit ${r.exitCode}: ${r.stdout.toString().slice(0, 300)} ${r.stderr.toString().slice(0, 300)}`
const exists = async (p: string): Promise<boolean> => await access(p).then(() => true, () => false)
async function sha256 (path: string): Promise<string> {
  const h = createHash('sha256')
  for await (const c of createReadStream(path)) h.update(c as Buffer)
  return h.digest('hex')
}

const images = await ensureDebianImages()
const kernel = await ensureGuestKernel()
const python = images.images['python-v1']
// Not t.testdir(): its removal would run before the mount below is gone.
const work = await mkdtemp('/var/tmp/layerd-vm-test-')
const config: OciImageConfig = { config: { Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'GREETING=hi'], WorkingDir: '/root', Cmd: ['/bin/bash'] } }

// The block view, pushed as a one-layer image and mounted by a real layerd (cold cache).
const built = await buildBlockView(python.rootfs, { uuidSeed: python.manifestDigest, out: join(work, 'python-v1.raw') })
const storeUrl = `file://${join(work, 'store')}`
{
  const store = openStore(storeUrl)
  await pushBlockViewImage(built.path, parseRef('bv/python:v1'), config, { store, db: openMemoryNodeDb() })
  await store.close()
}
const node = layerdNode(join(work, 'node'), { store: storeUrl })
await node.startDaemon()
const mnt = join(work, 'node', 'mnt')
t.teardown(async () => {
  await node.layerctl('umount', mnt)
  await node.stopDaemon()
  await rm(work, { recursive: true, force: true })
})
const mounted = await node.layerctl('mount', 'bv/python:v1', mnt)
if (mounted.code !== 0) throw new Error(`layerctl mount: ${mounted.stderr}`)
const blockView = join(mnt, BLOCK_VIEW_FILE)
const mountStats = async (): Promise<{ fetchedBytes: number, storedBytes: number, imageBytes: number }> => JSON.parse((await node.layerctl('stats', mnt, '--json')).stdout)

const common = { kernel: kernel.source, cacheDir: kernel.preparedDir, runDir: join('/run/layerd-test', String(process.pid)) }
t.teardown(async () => { await rm(common.runDir, { recursive: true, force: true }) })
const microvm = new MicrovmTierDriver({ ...common, accel: 'auto' })
const vm = new VmTierDriver({ ...common, accel: 'auto' })
let n = 0
const create = async (tt: Test, driver: MicrovmTierDriver | VmTierDriver, limits: Partial<SandboxLimits> = {}, view = blockView): Promise<VmSandbox & { stateDir: string }> => {
  const id = `t${process.pid}-${driver.tier}-${++n}`
  const stateDir = join(work, 'sandboxes', id)
  const sb = await driver.create({ id, imageName: 'bv/python:v1', config, blockView: view, stateDir, limits: { ...DEFAULT_LIMITS, diskBytes: 256 * MIB, ...limits } })
  tt.teardown(async () => { await sb.destroy() })
  tt.comment(`${driver.tier} ${id}: booted in ${sb.timings.bootMs.toFixed(0)} ms (guest uptime at ready ${sb.timings.guestUptimeMs} ms)`)
  return Object.assign(sb, { stateDir })
}

t.test('MicrovmTierDriver: exec() runs the image\'s programs with its config, from a block view fetched only in part', async t => {
  t.equal(await microvm.unavailableReason(), undefined)
  const sb = await create(t, microvm)
  const booted = await mountStats()
  t.comment(`fetched ${(booted.fetchedBytes / 1024).toFixed(0)} KiB of the block view to boot to the agent`)
  const osRelease = await sb.exec({ cmd: ['cat', '/etc/os-release'] })
  t.equal(osRelease.exitCode, 0)
  t.equal(osRelease.stdout.toString(), await readFile(join(python.rootfs, 'etc/os-release'), 'utf8'))
  const py = await sb.exec({ cmd: ['python3', '-c', 'print(2+2)'] })
  t.equal(py.stdout.toString(), '4\n', py.stderr.toString())
  t.equal(py.exitCode, 0)

  const r = await sb.exec({ cmd: ['sh', '-c', 'printf "a\\000b\\377"; printf oops >&2; exit 7'] })
  t.equal(r.exitCode, 7, 'a non-zero exit code comes back unchanged')
  t.same([...r.stdout], [0x61, 0, 0x62, 0xff], 'binary stdout is exact')
  t.equal(r.stderr.toString(), 'oops')
  const big = Buffer.alloc(300 * 1024, 7)
  const cat = await sb.exec({ cmd: ['sha256sum'], stdin: big })
  t.equal(cat.stdout.toString().split(' ')[0], createHash('sha256').update(big).digest('hex'), 'stdin arrives whole')
  const ctx = await sb.exec({ cmd: ['sh', '-c', 'echo "$GREETING|$HOME"; pwd; id -u; id -g'], user: 'daemon', cwd: '/srv/app' })
  t.equal(ctx.stdout.toString(), 'hi|/usr/sbin\n/srv/app\n1\n1\n', 'image env, exec user (with its home) and working directory apply')
  const img = await sb.exec({ cmd: [], env: ['GREETING=over'], stdin: Buffer.from('echo "$GREETING $PWD"\n') })
  t.equal(img.stdout.toString(), 'over /root\n', 'no cmd runs the image\'s Cmd in its WorkingDir; exec env wins')
  await t.rejects(sb.exec({ cmd: ['true'], user: 'no-such-user' }), { code: 'ERR_USAGE' }, 'an unknown user is a usage error')
  t.equal((await sb.exec({ cmd: ['no-such-program'] })).exitCode, 127)

  const s = await mountStats()
  t.comment(`block view: ${(s.imageBytes / MIB).toFixed(0)} MiB raw, ${(s.storedBytes / MIB).toFixed(1)} MiB stored; fetched ${(s.fetchedBytes / MIB).toFixed(1)} MiB to boot and run these commands`)
  t.ok(s.fetchedBytes < s.imageBytes * 0.25, `fetched ${(100 * s.fetchedBytes / s.imageBytes).toFixed(1)}% of the block view`)

  const fc = JSON.parse(await readFile(join(sb.stateDir, 'firecracker.json'), 'utf8'))
  t.same(fc.drives.map((d: { path_on_host: string, is_read_only: boolean }) => [d.path_on_host, d.is_read_only]), [[blockView, true], [join(sb.stateDir, 'scratch.ext4'), false]], 'a Firecracker config is written: block view read-only, scratch disk writable')
  t.equal(fc['boot-source'].kernel_image_path, sb.kernel.vmlinux)
})

t.test('MicrovmTierDriver: writes stay in the VM\'s overlay; a new VM sees the image; a flood stops at the quota', async t => {
  const a = await create(t, microvm)
  const w = await a.exec({ cmd: ['sh', '-c', 'rm /bin/ls && echo evil > /etc/x && cat /etc/x && ls; echo "ls=$?"'] })
  t.match(w.stdout.toString(), /evil\nls=127/)
  const quota = 64 * MIB
  const b = await create(t, microvm, { diskBytes: quota })
  const seen = await b.exec({ cmd: ['sh', '-c', 'test -e /etc/x && echo has-x; ls /bin/ls'] })
  t.equal(seen.stdout.toString(), '/bin/ls\n', 'the second VM has /bin/ls and no /etc/x')
  const again = await a.exec({ cmd: ['sh', '-c', 'test -e /bin/ls || echo gone; cat /etc/x'] })
  t.equal(again.stdout.toString(), 'gone\nevil\n', 'files persist between execs of one VM')

  const flood = await b.exec({ cmd: ['sh', '-c', 'dd if=/dev/zero of=/big bs=1M count=400 2>&1; echo "dd=$?"; stat -c %s /big; yes > /yes; echo "yes=$?"'], timeoutMs: 120_000 })
  const out = flood.stdout.toString()
  t.equal(flood.timedOut, false)
  t.match(out, /No space left on device/)
  t.match(out, /dd=1/)
  t.match(out, /yes=1/)
  const written = Number(/^(\d+)$/m.exec(out)?.[1])
  t.ok(written > quota * 0.9 && written <= quota * 1.02, `dd wrote ${(written / MIB).toFixed(1)} MiB against a ${quota / MIB} MiB quota`)
  const overlay = await stat(join(b.stateDir, 'overlay.qcow2'))
  const virtual = JSON.parse((await run('qemu-img', ['info', '--output=json', '-U', join(b.stateDir, 'overlay.qcow2')])).stdout)['virtual-size'] as number
  t.ok(overlay.size <= virtual + 8 * MIB, `the overlay file (${(overlay.size / MIB).toFixed(0)} MiB) stays within its ${(virtual / MIB).toFixed(0)} MiB virtual size`)
  const freed = await b.exec({ cmd: ['sh', '-c', 'rm /big /yes && echo ok > /tmp/ok && cat /tmp/ok'] })
  t.equal(freed.stdout.toString(), 'ok\n', 'deleting frees the quota')

  // Root in the guest can also write to its serial console, which the host logs: that log is capped too.
  const con = await b.exec({ cmd: ['sh', '-c', `head -c ${CONSOLE_FILE_BYTES + 200 * 1024} /dev/zero | tr '\\0' x > /dev/ttyS0; echo rc=$?`], timeoutMs: 90_000 })
  t.equal(con.stdout.toString(), 'rc=0\n', describeResult(con))
  await new Promise(resolve => setTimeout(resolve, 500)) // the last bytes in flight
  const logged = (await stat(join(b.stateDir, 'console.log'))).size
  t.ok(logged >= CONSOLE_FILE_BYTES && logged < CONSOLE_FILE_BYTES + 1024, `a console flood of ${((CONSOLE_FILE_BYTES + 200 * 1024) / MIB).toFixed(2)} MiB leaves a ${(logged / MIB).toFixed(2)} MiB log`)
})

t.test('VmSandbox: a timeout kills the command, stop() ends execs, destroy() removes the VM and its state', async t => {
  const sb = await create(t, microvm)
  const started = performance.now()
  const slow = await sb.exec({ cmd: ['sh', '-c', 'sleep 60 & sleep 60'], timeoutMs: 1500 })
  t.equal(slow.timedOut, true)
  t.equal(slow.signal, 'SIGKILL')
  t.equal(slow.exitCode, 137)
  t.ok(performance.now() - started < 15_000, 'killed within the bound')
  t.equal((await sb.exec({ cmd: ['sh', '-c', 'ps -e -o comm= | grep -c sleep'] })).stdout.toString(), '0\n', 'nothing of the killed command is left')

  const pid = Number(await readFile(join(sb.stateDir, 'qemu.pid'), 'utf8'))
  t.match(await readFile(`/proc/${pid}/status`, 'utf8'), /^Uid:\s+65534\s/m, 'QEMU runs as nobody once its files are open')
  t.match(await readFile(`/proc/${pid}/status`, 'utf8'), /^Seccomp:\s+2$/m, 'under a seccomp filter')
  const running = sb.exec({ cmd: ['sleep', '60'] })
  await new Promise(resolve => setTimeout(resolve, 500))
  await sb.destroy()
  const r = await running
  t.not(r.exitCode, 0, 'the running command ended when the VM was destroyed')
  t.throws(() => process.kill(pid, 0), 'QEMU is gone')
  t.notOk(await exists(sb.stateDir), 'state removed')
  await t.rejects(sb.exec({ cmd: ['true'] }), { code: 'ERR_USAGE' }, 'exec after destroy is refused')
  await sb.destroy()
})

t.test('VmTierDriver: a full machine boots the host kernel when the image has none', async t => {
  t.equal(await vm.unavailableReason(), undefined)
  const sb = await create(t, vm)
  t.equal(sb.kernel.vmlinux, kernel.kernel, 'the host kernel')
  const o = await sb.exec({ cmd: ['cat', '/etc/os-release'] })
  t.equal(o.stdout.toString(), await readFile(join(python.rootfs, 'etc/os-release'), 'utf8'))
  const py = await sb.exec({ cmd: ['python3', '-c', 'import sys; print(2+2); sys.exit(3)'] })
  t.equal(py.stdout.toString(), '4\n')
  t.equal(py.exitCode, 3)
})

t.test('VmTierDriver: boots the kernel inside the image, copying only the files it needs out of the block view', async t => {
  // An image with a kernel: the base tree plus Debian's kernel and (the guest's) modules with a modules.dep, as installed.
  const tree = join(work, 'base-with-kernel')
  await run('cp', ['-a', images.images.base.rootfs, tree])
  const release = kernel.modulesVersion
  const bootDir = join(tree, 'boot')
  await mkdir(bootDir, { recursive: true })
  // A byte appended after the bzImage payload makes this kernel file differ from the host's, so the test can tell which one booted.
  await writeFile(join(bootDir, `vmlinuz-${release}`), Buffer.concat([await readFile(kernel.source.kernel), Buffer.from([0])]))
  const modulesDir = join(tree, 'usr/lib/modules', release)
  const modules = await resolveGuestModules(kernel.source.modulesDir)
  const relOf = new Map(modules.map(m => [m.name, relative(kernel.source.modulesDir, m.path)]))
  const dep: string[] = []
  for (const m of modules) {
    const rel = relOf.get(m.name)!
    await mkdir(dirname(join(modulesDir, rel)), { recursive: true })
    await copyFile(m.path, join(modulesDir, rel))
    const deps = (readModinfo(m.bytes, m.path).get('depends') ?? []).flatMap(d => d.split(',')).filter(d => d !== '')
    dep.push(`${rel}: ${deps.map(d => relOf.get(d.replace(/-/g, '_'))!).join(' ')}`)
  }
  // A module the guest does not need, which must stay in the image.
  await mkdir(join(modulesDir, 'kernel/fs/unneeded'), { recursive: true })
  await copyFile(join(kernel.source.modulesDir, relOf.get('crc16')!), join(modulesDir, 'kernel/fs/unneeded/unneeded.ko'))
  dep.push('kernel/fs/unneeded/unneeded.ko:')
  await writeFile(join(modulesDir, 'modules.dep'), `${dep.join('\n')}\n`)
  await copyFile(join(kernel.source.modulesDir, 'modules.builtin'), join(modulesDir, 'modules.builtin'))
  const view = await buildBlockView(tree, { uuidSeed: 'base-with-kernel', out: join(work, 'base-with-kernel.raw') })

  const sb = await create(t, vm, {}, view.path)
  t.ok(sb.kernel.vmlinux.startsWith(kernel.preparedDir), 'prepared in the driver cache')
  t.not(sb.kernel.vmlinux, kernel.kernel, 'not the host kernel: the image\'s own')
  const found = await findImageKernel(view.path)
  t.equal(found?.release, release)
  const copied = (await readdir(join(kernel.preparedDir, 'image-kernels', `${release}-${found!.identity}`), { recursive: true })).filter(f => f.endsWith('.ko'))
  t.equal(copied.length, modules.length, `the ${modules.length} modules the guest loads were copied out of the block view`)
  t.notOk(copied.some(f => f.endsWith('unneeded.ko')), 'and not the others')
  const u = await sb.exec({ cmd: ['uname', '-r'] })
  t.equal(u.stdout.toString(), `${release}\n`)
  t.equal((await sb.exec({ cmd: ['sh', '-c', 'test -x /bin/ls && echo base'] })).stdout.toString(), 'base\n')
})

t.test('the block view on the mount is unchanged after all of this', async t => {
  t.equal(await sha256(blockView), await sha256(built.path), 'the FUSE file still equals the block view that was pushed')
})
