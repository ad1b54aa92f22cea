/**
 * The guest's boot pieces from Debian's real kernel package (the fixture):
 * module dependencies from .modinfo, vmlinux out of the bzImage, and an
 * initrd that busybox cpio reads back with everything /init needs.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { gunzipSync } from 'node:zlib'
import { ensureGuestKernel } from '../../../fixtures/guest-kernel.js'
import { encodeCpioNewc } from './cpio-newc.js'
import { buildGuestAgent, buildInitrd, INIT_SCRIPT } from './initrd-builder.js'
import { GUEST_MODULES_REQUIRED, readModinfo, resolveGuestModules } from './kernel-modules.js'
import { extractVmlinux, isElf } from './vmlinux-extract.js'

const run = promisify(execFile)
const kernel = await ensureGuestKernel()

t.test('resolveGuestModules() puts every dependency before its user, from the modules\' own .modinfo', async t => {
  const modules = await resolveGuestModules(kernel.source.modulesDir)
  const names = modules.map(m => m.name)
  for (const wanted of GUEST_MODULES_REQUIRED) t.ok(names.includes(wanted), `${wanted} is loaded`)
  for (const m of modules) {
    const deps = (readModinfo(m.bytes, m.path).get('depends') ?? []).flatMap(d => d.split(',')).filter(d => d !== '')
    for (const d of deps) t.ok(names.indexOf(d.replace(/-/g, '_')) < names.indexOf(m.name), `${d} before ${m.name}`)
  }
  t.ok(names.indexOf('jbd2') < names.indexOf('ext4'))
  t.throws(() => readModinfo(Buffer.from('not an elf file at all, not at all, no, not at all, really not'), 'x'), { code: 'ERR_BAD_INPUT' })
  await t.rejects(resolveGuestModules(kernel.source.modulesDir, ['no_such_module']), { code: 'ERR_NOT_FOUND' })
})

t.test('extractVmlinux() returns the ELF kernel inside Debian\'s bzImage', async t => {
  const bz = await readFile(kernel.source.kernel)
  t.notOk(isElf(bz))
  const vmlinux = await extractVmlinux(bz, kernel.source.kernel)
  t.ok(isElf(vmlinux), 'an ELF file')
  t.ok(vmlinux.length > bz.length * 2, `uncompressed: ${(vmlinux.length / 1e6).toFixed(0)} MB from ${(bz.length / 1e6).toFixed(0)} MB`)
  t.ok(vmlinux.includes(Buffer.from(`Linux version ${kernel.modulesVersion}`)), 'the kernel\'s own version string is inside')
  t.equal(await extractVmlinux(vmlinux, 'elf'), vmlinux, 'an ELF comes back as it is')
  await t.rejects(extractVmlinux(Buffer.alloc(4096), 'zeros'), { code: 'ERR_BAD_INPUT' })
})

t.test('buildInitrd() writes a deterministic archive that cpio reads back: init, agent, busybox, modules', async t => {
  const dir = t.testdir({})
  const agent = await buildGuestAgent(join(dir, 'agent'))
  const a = await buildInitrd({ modulesDir: kernel.source.modulesDir, out: join(dir, 'a.img'), agent })
  const b = await buildInitrd({ modulesDir: kernel.source.modulesDir, out: join(dir, 'b.img'), agent })
  t.equal(a.sha256, b.sha256, 'same inputs, same bytes')
  const cpio = gunzipSync(await readFile(a.path))
  await writeFile(join(dir, 'initrd.cpio'), cpio)
  const listing = (await run('busybox', ['cpio', '-t', '-F', join(dir, 'initrd.cpio')])).stdout.split('\n')
  for (const p of ['init', 'bin/busybox', 'bin/layerd-agent', 'bin/sh', 'dev/console', 'etc/layerd-modules', 'lib/layerd-modules/ext4.ko', 'newroot']) t.ok(listing.includes(p), `has ${p}`)
  const out = join(dir, 'x')
  await run('sh', ['-c', `mkdir ${out} && cd ${out} && busybox cpio -i -d -F ../initrd.cpio 2>/dev/null`])
  t.equal(await readFile(join(out, 'init'), 'utf8'), INIT_SCRIPT)
  t.equal((await readFile(join(out, 'etc/layerd-modules'), 'utf8')).trim().split('\n').join(' '), a.modules.join(' '))
  t.same(await readFile(join(out, 'bin/layerd-agent')), await readFile(agent), 'the agent is intact')
  await run('sh', ['-n', join(out, 'init')]).then(() => t.pass('/init parses as sh'))
  t.throws(() => encodeCpioNewc([{ type: 'file', path: '/abs', data: Buffer.alloc(0) }]), { code: 'ERR_BAD_INPUT' })
})
