/**
 * The VM tiers through the library API, on the real path: layerd builds the
 * Debian python image's block view on the first VM request, stores it, and
 * serves it lazily through FUSE. The image and the daemon are made once in
 * a before hook; each subtest boots the VMs it needs.
 */
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { ensureGuestKernel } from '../../fixtures/guest-kernel.js'
import { layerdNode, mountsUnder } from '../../fixtures/layerd-harness.js'
import { createSandbox, type ManagedSandbox } from './create-sandbox.js'
import type { Tier } from '../runtime/sandbox.js'
import { pushInto } from '../../fixtures/store-steps.js'

// Whatever fails below, layerd is stopped (stopDaemon does nothing when it is not running). Registered
// before t.testdir(), whose own clean-up runs in order after it: rmdir fails (EBUSY) under live mounts.
const node = layerdNode(join(t.testdirName, 'home'))
t.teardown(() => node.stopDaemon())
t.testdir()
// The shared fixture: the image pushed and layerd running, made once before the subtests; each
// subtest then does its own work, so any one of them passes or fails alone (tap --grep).
t.before(async () => {
  const images = await ensureDebianImages()
  await ensureGuestKernel()
  await pushInto(node.store, images.images['python-v1'].dockerArchive, 'deb/python:v1')
  await node.startDaemon()
})

const TIERS: Tier[] = ['microvm', 'vm']
const boot = async (t: Test, tier: Tier): Promise<ManagedSandbox> => {
  const sb = await createSandbox({ image: 'deb/python:v1', tier, home: node.home, store: node.store, limits: { diskBytes: 256 * 1024 ** 2 } })
  t.teardown(() => sb.destroy())
  return sb
}

for (const tier of TIERS) {
  t.test(`createSandbox({ tier: '${tier}' }) boots the image's block view and runs its programs`, async t => {
    const sb = await boot(t, tier)
    const r = await sb.exec({ cmd: ['sh', '-c', 'grep PRETTY_NAME /etc/os-release; python3 -c "print(2+2)"; pwd; exit 5'] })
    t.equal(r.stdout.toString(), 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n4\n/root\n', r.stderr.toString())
    t.equal(r.exitCode, 5, 'the exit code comes back unchanged')
  })
}

t.test('the block view is stored once and a VM fetches well under its size', async t => {
  // Boots its own VM of each tier (it does not count on the subtests above having run).
  for (const tier of TIERS) {
    const r = await (await boot(t, tier)).exec({ cmd: ['python3', '-c', 'print(2+2)'] })
    t.equal(r.stdout.toString(), '4\n', `${tier}: python runs (${r.stderr.toString()})`)
  }
  const mounts = JSON.parse((await node.layerctl('mounts', '--json')).stdout) as Array<{ mountpoint: string, image: string }>
  const views = []
  for (const m of mounts) {
    const s = JSON.parse((await node.layerctl('stats', m.mountpoint, '--json')).stdout)
    if (s.imageBytes > 0 && s.inodes <= 2) views.push(s) // the one-file layer: root + disk.raw
  }
  t.equal(views.length, 1, 'both tiers use the same block view mount')
  const v = views[0]
  t.ok(v.fetchedBytes < 0.25 * v.storedBytes, `booting VMs and running python fetched ${v.fetchedBytes} of ${v.storedBytes} stored bytes (block view ${v.imageBytes} bytes)`)
})

t.test('layerd stops cleanly after the VM tiers, leaving no mount behind', async t => {
  await node.stopDaemon()
  t.equal(await mountsUnder(node.home), 0)
})
