/**
 * The pure parts of a VM's set-up: QEMU argv, guest command line, the
 * Firecracker config; and the overlay size for a quota, checked against a
 * real ext4 grown by e2fsprogs.
 */
import t from 'tap'
import { copyFile, rm, stat, truncate } from 'node:fs/promises'
import { join } from 'node:path'
import { firecrackerConfig } from './firecracker-config.js'
import { guestCmdline, qemuArgs, type QemuVmConfig } from './qemu-args.js'
import { planOverlay, readSuperblock } from './vm-disks.js'
import { buildBlockView } from '../../blockview/block-view-builder.js'
import { runHost } from '../../host/host-command.js'

const MIB = 1024 * 1024
const base: QemuVmConfig = {
  machine: 'microvm', accel: 'tcg', kernel: '/k/vmlinux', initrd: '/k/initrd', cmdline: 'console=ttyS0', memoryMiB: 256, cpus: 1,
  blockView: '/mnt/disk.raw', overlay: '/s/overlay.qcow2', agentSocket: '/run/a.sock', monitorSocket: '/run/m.sock', consoleSocket: '/run/c.sock'
}

t.test('qemuArgs() attaches the block view read-only behind the overlay, with virtio-mmio or virtio-pci devices', async t => {
  const micro = qemuArgs(base).join(' ')
  t.match(micro, /-M microvm,x-option-roms=off/)
  t.match(micro, /filename=\/mnt\/disk\.raw,read-only=on,locking=off/)
  t.match(micro, /driver=qcow2,file=overlay-file,backing=blockview/)
  t.match(micro, /virtio-blk-device,drive=root/)
  t.match(micro, /virtserialport,chardev=agent,name=org\.layerd\.agent/)
  t.match(micro, /-nodefaults -no-user-config -display none -no-reboot/)
  t.match(micro, /-cpu max/)
  const pc = qemuArgs({ ...base, machine: 'pc', accel: 'kvm' }).join(' ')
  t.match(pc, /-M pc /)
  t.match(pc, /virtio-blk-pci,drive=root/)
  t.match(pc, /virtio-serial-pci/)
  t.match(pc, /-accel kvm -cpu host/)
})

t.test('guestCmdline() pins the TSC under TCG only and passes the limits to /init', async t => {
  const tcg = guestCmdline({ accel: 'tcg', tscKhz: 2100000, pids: 64, resize: true, channel: 'serial', reboot: 't' })
  t.match(tcg, /tsc_early_khz=2100000/)
  t.match(tcg, /layerd\.pids=64/)
  t.match(tcg, /layerd\.resize=1/)
  t.match(tcg, /layerd\.channel=serial/)
  const kvm = guestCmdline({ accel: 'kvm', pids: 64, resize: false, scratchDevice: '/dev/vdb', channel: { vsockPort: 1024 }, reboot: 'k' })
  t.notMatch(kvm, /tsc/)
  t.match(kvm, /layerd\.scratch=\/dev\/vdb/)
  t.match(kvm, /layerd\.channel=vsock:1024/)
  t.match(kvm, /reboot=k/)
})

t.test('firecrackerConfig() names kernel, initrd, boot args, drives, machine and vsock as Firecracker expects', async t => {
  const c = firecrackerConfig({ vmlinux: '/k/vmlinux', initrd: '/k/initrd', bootArgs: 'console=ttyS0', blockView: '/mnt/disk.raw', scratchDisk: '/s/scratch.ext4', vcpus: 2, memoryMiB: 512, vsockPath: '/run/v.sock' })
  t.same(c, {
    'boot-source': { kernel_image_path: '/k/vmlinux', initrd_path: '/k/initrd', boot_args: 'console=ttyS0' },
    drives: [
      { drive_id: 'blockview', path_on_host: '/mnt/disk.raw', is_root_device: false, is_read_only: true },
      { drive_id: 'scratch', path_on_host: '/s/scratch.ext4', is_root_device: false, is_read_only: false }
    ],
    'machine-config': { vcpu_count: 2, mem_size_mib: 512, smt: false },
    vsock: { guest_cid: 3, uds_path: '/run/v.sock' }
  })
})

t.test('planOverlay() sizes the disk so that a real ext4 grown into it (resize2fs) has the quota free, and little more', async t => {
  // Independent of the plan's own estimate: a real block view (mkfs.ext4 -d,
  // as images get), copied, grown to the planned size and resized by
  // e2fsprogs, then its free blocks read back from its superblock.
  const dir = t.testdir({ tree: { etc: { data: 'x'.repeat(100_000) } } })
  const raw = join(dir, 'disk.raw')
  await buildBlockView(join(dir, 'tree'), { out: raw, uuidSeed: 'plan-overlay', headroomBytes: 4 * MIB })
  const sb = await readSuperblock(raw)
  const rawBytes = (await stat(raw)).size
  t.ok(sb.freeBytes < 16 * MIB, `the block view itself has ${(sb.freeBytes / MIB).toFixed(2)} MiB free: every quota below needs growth`)
  for (const quota of [16 * MIB, 64 * MIB, 200 * MIB, 1024 * MIB]) {
    const plan = planOverlay(sb, rawBytes, quota)
    t.equal(plan.virtualBytes % MIB, 0, `quota ${quota / MIB} MiB: the disk is whole MiB`)
    const grown = join(dir, `grown-${quota / MIB}.raw`)
    await copyFile(raw, grown)
    await truncate(grown, plan.virtualBytes)
    await runHost('resize2fs', ['-f', grown])
    const free = (await readSuperblock(grown)).freeBytes
    t.ok(free >= quota && free < quota + 4 * MIB,
      `quota ${quota / MIB} MiB → a ${plan.virtualBytes / MIB} MiB disk whose ext4, grown by resize2fs, has ${(free / MIB).toFixed(2)} MiB free`)
    await rm(grown)
  }
  t.equal(planOverlay(sb, rawBytes, MIB).virtualBytes, Math.ceil(rawBytes / MIB) * MIB, 'a quota below the free space keeps the block view\'s size')
})
