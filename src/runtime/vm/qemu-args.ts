/**
 * The QEMU command line of a layerd VM, for both VM tiers:
 *
 * - microvm: `-M microvm` (no PCI, no firmware option ROMs; virtio-mmio
 *   devices found through ACPI), the Firecracker-like device model.
 * - vm: `-M pc` with virtio-blk-pci and virtio-serial-pci, a full machine.
 *
 * Both boot kernel + initrd directly (an ELF vmlinux boots through PVH,
 * skipping the guest's own decompression), with no default devices, one
 * disk and one agent port. The disk is the per-VM qcow2 overlay whose
 * backing is the image's block view. The block view is opened read-only and without
 * locks (it is immutable and shared by every VM of the image); the overlay
 * ignores guest flushes (it dies with the VM).
 *
 * Pure: no fs, network or native code.
 */

export type QemuMachine = 'microvm' | 'pc'
export type Accel = 'kvm' | 'tcg'

export const BLOCK_VIEW_FILE_NODE = 'blockview-file'
export const AGENT_PORT_NAME = 'org.layerd.agent'

export interface QemuVmConfig {
  machine: QemuMachine
  accel: Accel
  /** vmlinux (ELF, PVH) or bzImage. */
  kernel: string
  initrd: string
  cmdline: string
  memoryMiB: number
  cpus: number
  blockView: string
  overlay: string
  /** Unix socket the host listens on; QEMU connects to it as the agent port's backend. */
  agentSocket: string
  /** Unix socket of QEMU's human monitor (diagnostics of a boot that hangs). */
  monitorSocket: string
  /** Unix socket the host listens on for the guest's serial console (QEMU connects). */
  consoleSocket: string
  /** Drop to this user once QEMU has opened its files (`-runas`). */
  runAs?: string
}

/** argv after the QEMU binary. Sync, pure. */
export function qemuArgs (c: QemuVmConfig): string[] {
  const mmio = c.machine === 'microvm'
  const machine = mmio
    ? 'microvm,x-option-roms=off,isa-serial=on,rtc=on,pit=on,pic=on,acpi=on'
    : 'pc'
  return [
    '-name', 'layerd-vm',
    '-M', machine,
    '-accel', c.accel,
    '-cpu', c.accel === 'kvm' ? 'host' : 'max',
    '-smp', String(c.cpus),
    '-m', `${c.memoryMiB}M`,
    '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot',
    // Hardening against a guest that escapes into QEMU: a seccomp filter (no exec, no obsolete
    // syscalls) and, once every file and socket is open, no root. -runas itself calls setuid, so
    // setuid stays allowed with it (a process that is nobody cannot become root again).
    '-sandbox', `on,obsolete=deny,spawn=deny,resourcecontrol=deny,elevateprivileges=${c.runAs === undefined ? 'deny' : 'allow'}`,
    ...(c.runAs === undefined ? [] : ['-runas', c.runAs]),
    '-kernel', c.kernel,
    '-initrd', c.initrd,
    '-append', c.cmdline,
    '-chardev', `socket,id=console,path=${c.consoleSocket}`,
    '-serial', 'chardev:console',
    '-monitor', `unix:${c.monitorSocket},server=on,wait=off`,
    '-blockdev', `node-name=${BLOCK_VIEW_FILE_NODE},driver=file,filename=${c.blockView},read-only=on,locking=off`,
    '-blockdev', `node-name=blockview,driver=raw,file=${BLOCK_VIEW_FILE_NODE},read-only=on`,
    '-blockdev', `node-name=overlay-file,driver=file,filename=${c.overlay},cache.no-flush=on`,
    '-blockdev', 'node-name=root,driver=qcow2,file=overlay-file,backing=blockview,cache.no-flush=on,discard=unmap',
    '-device', `${mmio ? 'virtio-blk-device' : 'virtio-blk-pci'},drive=root`,
    '-device', `${mmio ? 'virtio-serial-device' : 'virtio-serial-pci'},max_ports=2`,
    '-chardev', `socket,id=agent,path=${c.agentSocket}`,
    '-device', `virtserialport,chardev=agent,name=${AGENT_PORT_NAME}`
  ]
}

export interface GuestCmdlineOptions {
  accel: Accel
  /** The host's TSC frequency (TCG's guest TSC is the host's); skips a calibration that hangs on a loaded host. */
  tscKhz?: number
  pids: number
  /** Grow the root filesystem to the disk (the qcow2 overlay is the disk quota bigger). */
  resize: boolean
  /** Firecracker: the root is read-only, writes go to an overlayfs upper on this disk. */
  scratchDevice?: string
  channel: 'serial' | { vsockPort: number }
  /** reboot= method: `t` (triple fault) for QEMU, `k` (keyboard controller) for Firecracker. */
  reboot: 't' | 'k'
  /** No PCI bus (microvm, Firecracker): `pci=off` skips probing for one. */
  noPci?: boolean
}

/**
 * The guest kernel command line. `mitigations=off`: one sandbox per VM, so
 * there is no other tenant inside the guest to protect, and under TCG the
 * page-table isolation switch on every syscall is a large cost.
 */
export function guestCmdline (o: GuestCmdlineOptions): string {
  // loglevel=4: the console stays quiet on a good boot (every byte is an emulated UART write) but shows warnings (stalls, oopses).
  const args = ['console=ttyS0', 'quiet', 'loglevel=4', 'panic=-1', `reboot=${o.reboot}`, 'mitigations=off', 'random.trust_cpu=on']
  if (o.noPci === true) args.push('pci=off')
  if (o.accel === 'tcg') {
    args.push('tsc=reliable', 'no_timer_check')
    if (o.tscKhz !== undefined) args.push(`tsc_early_khz=${o.tscKhz}`)
  }
  args.push('layerd.root=/dev/vda', `layerd.pids=${o.pids}`)
  if (o.resize) args.push('layerd.resize=1')
  if (o.scratchDevice !== undefined) args.push(`layerd.scratch=${o.scratchDevice}`)
  args.push(`layerd.channel=${o.channel === 'serial' ? 'serial' : `vsock:${o.channel.vsockPort}`}`)
  return args.join(' ')
}
