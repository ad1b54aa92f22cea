/**
 * The pure parts of a VM's set-up: QEMU argv, guest command line, the
 * Firecracker config and the overlay size for a quota.
 */
import t from 'tap'
import type { Ext4Superblock } from '../../format/ext4-superblock.js'
import { firecrackerConfig } from './firecracker-config.js'
import { guestCmdline, qemuArgs, type QemuVmConfig } from './qemu-args.js'
import { planOverlay } from './vm-disks.js'

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

t.test('planOverlay() makes the guest\'s free space the quota, metadata of the added groups included', async t => {
  const sb: Ext4Superblock = {
    blockSize: 4096, blocksCount: 46592, freeBlocks: 1700, inodesCount: 10208, freeInodes: 1970, inodeSize: 256,
    blocksPerGroup: 32768, inodesPerGroup: 5104, uuid: 'u', volumeName: 'layerd', sizeBytes: 46592 * 4096, freeBytes: 1700 * 4096, hasJournal: false
  }
  for (const quota of [16 * MIB, 64 * MIB, 1024 * MIB]) {
    const p = planOverlay(sb, sb.sizeBytes, quota)
    t.ok(p.guestFreeBytes >= quota && p.guestFreeBytes < quota + 2 * MIB, `quota ${quota / MIB} MiB → ${(p.guestFreeBytes / MIB).toFixed(2)} MiB free in a ${(p.virtualBytes / MIB).toFixed(0)} MiB disk`)
  }
  const small = planOverlay(sb, sb.sizeBytes, MIB)
  t.equal(small.virtualBytes, Math.ceil(sb.sizeBytes / MIB) * MIB, 'a quota below the free space keeps the block view\'s size')
})
