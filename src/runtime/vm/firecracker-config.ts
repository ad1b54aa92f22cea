/**
 * The Firecracker VM configuration of a microvm sandbox, for
 * `firecracker --no-api --config-file FILE`
 * (https://github.com/firecracker-microvm/firecracker/blob/main/docs/getting-started.md,
 * "Configuring the microVM without sending API requests").
 *
 * Written for every microvm sandbox (`<stateDir>/firecracker.json`) so the
 * VM is reproducible with Firecracker, and used to run it when `firecracker`
 * is on PATH. UNTESTED HERE: this host has no Firecracker binary.
 *
 * Differences from the QEMU microvm, forced by Firecracker's device model:
 * - drives are raw files only (no qcow2): the block view is attached
 *   read-only and a per-VM sparse ext4 scratch disk of exactly the quota
 *   holds an overlayfs upper inside the guest (`layerd.scratch=/dev/vdb`);
 * - no virtio-serial: the agent connects over vsock to the host (CID 2),
 *   which Firecracker turns into a connection to `<uds_path>_<port>`;
 * - the kernel must be an ELF vmlinux, and must find Firecracker's
 *   virtio-mmio devices: Firecracker announces them on the kernel command
 *   line (`virtio_mmio.device=`), which needs
 *   CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES (Debian's kernel does not set it)
 *   unless the Firecracker version describes them in ACPI tables.
 *
 * Pure: no fs, network or native code.
 */

export const FIRECRACKER_VSOCK_PORT = 1024
const GUEST_CID = 3

export interface FirecrackerVmConfig {
  vmlinux: string
  initrd: string
  bootArgs: string
  blockView: string
  scratchDisk: string
  vcpus: number
  memoryMiB: number
  /** Base path of the vsock Unix socket; the host listens on `${vsockPath}_${FIRECRACKER_VSOCK_PORT}`. */
  vsockPath: string
}

/** Firecracker's JSON config. Sync, pure. */
export function firecrackerConfig (c: FirecrackerVmConfig): Record<string, unknown> {
  return {
    'boot-source': {
      kernel_image_path: c.vmlinux,
      initrd_path: c.initrd,
      boot_args: c.bootArgs
    },
    drives: [
      { drive_id: 'blockview', path_on_host: c.blockView, is_root_device: false, is_read_only: true },
      { drive_id: 'scratch', path_on_host: c.scratchDisk, is_root_device: false, is_read_only: false }
    ],
    'machine-config': { vcpu_count: c.vcpus, mem_size_mib: c.memoryMiB, smt: false },
    vsock: { guest_cid: GUEST_CID, uds_path: c.vsockPath }
  }
}

/** argv after the firecracker binary. */
export function firecrackerArgs (configFile: string): string[] {
  return ['--no-api', '--config-file', configFile]
}
