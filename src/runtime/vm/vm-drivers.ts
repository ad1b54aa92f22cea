/**
 * TierDrivers 'microvm' and 'vm': a sandbox is a VM booted from the image's
 * block view (spec.blockView, a raw ext4 file, normally on a layerd FUSE
 * mount) behind a per-VM copy-on-write disk.
 *
 * | tier    | hypervisor                                                   | kernel                                   |
 * |---------|--------------------------------------------------------------|------------------------------------------|
 * | microvm | `firecracker` when on PATH and KVM works, else QEMU -M microvm | host-provided (guest-kernel.ts)          |
 * | vm      | QEMU -M pc (virtio-blk-pci)                                  | the image's /boot/vmlinuz-*, else host's |
 *
 * Limits: memory = guest RAM (at least 128 MiB: a Debian kernel with its
 * initrd does not boot in less); pids = pids.max of the command's cgroup
 * inside the guest; disk = the copy-on-write disk (vm-disks.ts). KVM is
 * used when it boots the guest (vm-host.ts), TCG otherwise.
 *
 * Every microvm sandbox also gets `<stateDir>/firecracker.json`, the
 * Firecracker config that runs it (UNTESTED here: no Firecracker binary).
 *
 * May import: src/errors.ts, src/format/ext4-superblock.ts, ../sandbox.ts, ../process/, this folder, node built-ins.
 */
import { createHash } from 'node:crypto'
import { mkdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { UnsupportedError, UsageError } from '../../errors.js'
import { checkSandboxId } from '../process/host-checks.js'
import type { SandboxSpec, Tier, TierDriver } from '../sandbox.js'
import { FIRECRACKER_VSOCK_PORT, firecrackerArgs, firecrackerConfig } from './firecracker-config.js'
import { DEFAULT_VM_CACHE_DIR, findGuestKernelSource, prepareGuestKernel, type GuestKernel, type GuestKernelSearch, type GuestKernelSource } from './guest-kernel.js'
import { copyImageKernel, findImageKernel } from './image-kernel.js'
import { guestCmdline, qemuArgs, type Accel, type QemuMachine } from './qemu-args.js'
import { describeVcpus } from './qemu-monitor.js'
import { createOverlay, createScratchDisk } from './vm-disks.js'
import { chooseAccel, findOnPath, hostTscKhz } from './vm-host.js'
import { DEFAULT_BOOT_TIMEOUT_MS, VmBootTimeoutError, launchVm, type HypervisorLaunch, type VmSandbox } from './vm-sandbox.js'

export const DEFAULT_RUN_DIR = '/run/layerd/vm'
export const MIN_GUEST_MEMORY_MIB = 128
const MIB = 1024 * 1024

export interface VmDriverOptions {
  /** The host-provided kernel; default: findGuestKernelSource(kernelSearch). */
  kernel?: GuestKernelSource
  /** Where to look for it (the settings LAYERD_VM_KERNEL, LAYERD_VM_MODULES, LAYERD_VM_KERNEL_DIR). */
  kernelSearch?: GuestKernelSearch
  /** vmlinux, initrd, compiled agent, KVM probe result. Default /var/cache/layerd/vm. */
  cacheDir?: string
  /** Short directory for the VMs' Unix sockets (a socket path must fit in 108 bytes). Default /run/layerd/vm. */
  runDir?: string
  /** 'auto' (default) probes KVM and falls back to TCG; 'kvm' or 'tcg' (the setting LAYERD_VM_ACCEL) forces one. */
  accel?: string
  /** Guest vCPUs. Default 1. */
  cpus?: number
  /** QEMU binary. Default qemu-system-x86_64. */
  qemu?: string
  /** microvm: use Firecracker 'auto' (when on PATH and KVM works; default), 'never' or 'always'. */
  firecracker?: 'auto' | 'never' | 'always'
  /** Per boot attempt; default 60 s. */
  bootTimeoutMs?: number
  /**
   * Boots tried before create() gives up (default 2). Under TCG on a busy
   * host a guest very rarely stalls before its agent starts (seen once in
   * a few hundred boots); a fresh boot then works. Each failed attempt's
   * diagnostics go to `<stateDir>/boot-failure-N.txt`.
   */
  bootAttempts?: number
  /** Cap on collected stdout and on stderr of one exec. Default 16 MiB. */
  maxOutputBytes?: number
  /** QEMU drops root for this user once its files are open (`-runas`). Default 'nobody'; '' keeps root. */
  qemuUser?: string
}

abstract class VmTierDriverBase implements TierDriver {
  abstract readonly tier: Tier
  protected readonly opts: VmDriverOptions & { cacheDir: string, runDir: string, qemu: string }
  #hostKernel: Promise<GuestKernel> | undefined

  constructor (opts: VmDriverOptions = {}) {
    this.opts = { ...opts, cacheDir: opts.cacheDir ?? DEFAULT_VM_CACHE_DIR, runDir: opts.runDir ?? DEFAULT_RUN_DIR, qemu: opts.qemu ?? 'qemu-system-x86_64' }
  }

  /** The host-provided kernel, prepared once per driver. Async. Throws UnsupportedError when there is none. */
  protected async hostKernel (): Promise<GuestKernel> {
    this.#hostKernel ??= (async () => {
      const src = this.opts.kernel ?? await findGuestKernelSource(this.opts.kernelSearch)
      if (src === undefined) {
        throw new UnsupportedError('no guest kernel: set LAYERD_VM_KERNEL (and LAYERD_VM_MODULES), or unpack Debian\'s linux-image-amd64 package under /var/lib/layerd/guest-kernel (`node dist/fixtures/guest-kernel.js` does it)')
      }
      return await prepareGuestKernel(src, this.opts.cacheDir)
    })()
    this.#hostKernel.catch(() => { this.#hostKernel = undefined })
    return await this.#hostKernel
  }

  /** See {@link TierDriver.unavailableReason}. Prepares the host kernel (cached) to find out. */
  async unavailableReason (): Promise<string | undefined> {
    for (const tool of ['qemu-img', 'debugfs', 'mkfs.ext4']) {
      if (await findOnPath(tool) === undefined) return `${tool} is not installed (run .ci/setup)`
    }
    if (await findOnPath(this.opts.qemu) === undefined && !(this.tier === 'microvm' && await this.useFirecracker('kvm'))) return `${this.opts.qemu} is not installed (run .ci/setup)`
    try {
      await this.hostKernel()
    } catch (err) {
      return (err as Error).message
    }
    return undefined
  }

  protected async useFirecracker (accel: Accel): Promise<boolean> {
    const mode = this.opts.firecracker ?? 'auto'
    if (mode === 'never' || this.tier !== 'microvm') return false
    const onPath = await findOnPath('firecracker') !== undefined
    if (mode === 'always') {
      if (!onPath) throw new UnsupportedError('firecracker is not on PATH')
      return true
    }
    return onPath && accel === 'kvm'
  }

  protected abstract machine: QemuMachine
  protected abstract kernelFor (spec: SandboxSpec): Promise<GuestKernel>

  /**
   * Boot a VM for `spec` and wait for its agent. Async. Throws UsageError
   * for a spec without a block view or a bad id, UnsupportedError when the
   * host cannot run it or the VM does not boot (after cleaning up).
   */
  async create (spec: SandboxSpec): Promise<VmSandbox> {
    checkSandboxId(spec.id)
    if (spec.blockView === undefined) throw new UsageError(`sandbox ${spec.id}: the ${this.tier} tier needs the image's block view`)
    await mkdir(spec.stateDir, { recursive: true, mode: 0o700 })
    const runDir = join(this.opts.runDir, createHash('sha256').update(spec.stateDir).digest('hex').slice(0, 16))
    await mkdir(runDir, { recursive: true, mode: 0o700 })
    const cleanup = async (): Promise<void> => { await rm(runDir, { recursive: true, force: true }) }
    try {
      const kernel = await this.kernelFor(spec)
      const accel = await chooseAccel({ requested: this.opts.accel, qemu: this.opts.qemu, kernel: kernel.vmlinux, initrd: kernel.initrd, cacheDir: this.opts.cacheDir })
      const memoryMiB = Math.max(MIN_GUEST_MEMORY_MIB, Math.floor(spec.limits.memoryBytes / MIB))
      const cpus = this.opts.cpus ?? 1
      const init = { tier: this.tier, spec, kernel, bootTimeoutMs: this.opts.bootTimeoutMs ?? DEFAULT_BOOT_TIMEOUT_MS, maxOutputBytes: this.opts.maxOutputBytes, cleanup }
      const fc = {
        vmlinux: kernel.vmlinux, initrd: kernel.initrd, blockView: spec.blockView, scratchDisk: join(spec.stateDir, 'scratch.ext4'),
        vcpus: cpus, memoryMiB, vsockPath: join(runDir, 'v.sock'),
        bootArgs: guestCmdline({ accel: 'kvm', pids: spec.limits.pids, resize: false, scratchDevice: '/dev/vdb', channel: { vsockPort: FIRECRACKER_VSOCK_PORT }, reboot: 'k', noPci: true })
      }
      if (this.tier === 'microvm') await writeFile(join(spec.stateDir, 'firecracker.json'), `${JSON.stringify(firecrackerConfig(fc), null, 2)}\n`)
      let sandbox: VmSandbox
      if (await this.useFirecracker(accel)) {
        // UNTESTED HERE (no Firecracker binary on this host); see firecracker-config.ts.
        await createScratchDisk(fc.scratchDisk, spec.limits.diskBytes)
        const launch: HypervisorLaunch = {
          name: 'firecracker',
          argv: [(await findOnPath('firecracker'))!, ...firecrackerArgs(join(spec.stateDir, 'firecracker.json'))],
          consoleFile: join(spec.stateDir, 'console.log'),
          logFile: join(spec.stateDir, 'firecracker.log'),
          agentSocket: `${fc.vsockPath}_${FIRECRACKER_VSOCK_PORT}`
        }
        sandbox = await launchVm({ ...init, launch })
      } else {
        const overlay = join(spec.stateDir, 'overlay.qcow2')
        await createOverlay(spec.blockView, overlay, spec.limits.diskBytes)
        const agentSocket = join(runDir, 'agent.sock')
        const monitorSocket = join(runDir, 'monitor.sock')
        const consoleSocket = join(runDir, 'console.sock')
        const cmdline = guestCmdline({ accel, tscKhz: accel === 'tcg' ? await hostTscKhz() : undefined, pids: spec.limits.pids, resize: true, channel: 'serial', reboot: 't', noPci: this.machine === 'microvm' })
        const argv = qemuArgs({
          machine: this.machine, accel, kernel: kernel.vmlinux, initrd: kernel.initrd, cmdline, memoryMiB, cpus,
          blockView: spec.blockView, overlay, agentSocket, monitorSocket, consoleSocket,
          ...(this.opts.qemuUser === '' ? {} : { runAs: this.opts.qemuUser ?? 'nobody' })
        })
        const launch: HypervisorLaunch = {
          name: 'qemu', argv: [this.opts.qemu, ...argv], consoleFile: join(spec.stateDir, 'console.log'), consoleSocket, logFile: join(spec.stateDir, 'qemu.log'), agentSocket,
          diagnose: async () => await describeVcpus(monitorSocket)
        }
        const attempts = Math.max(1, this.opts.bootAttempts ?? 2)
        for (let attempt = 1; ; attempt++) {
          try {
            sandbox = await launchVm({ ...init, launch })
            break
          } catch (err) {
            if (!(err instanceof VmBootTimeoutError) || attempt >= attempts) throw err
            await writeFile(join(spec.stateDir, `boot-failure-${attempt}.txt`), `${err.message}\n`)
            await createOverlay(spec.blockView, overlay, spec.limits.diskBytes)
          }
        }
      }
      return sandbox
    } catch (err) {
      await cleanup()
      throw err
    }
  }
}

/** The microvm tier. */
export class MicrovmTierDriver extends VmTierDriverBase {
  readonly tier = 'microvm' as const
  protected readonly machine = 'microvm' as const
  protected async kernelFor (): Promise<GuestKernel> { return await this.hostKernel() }
}

/** The vm tier: a full QEMU machine, booting the image's own kernel when it has one. */
export class VmTierDriver extends VmTierDriverBase {
  readonly tier = 'vm' as const
  protected readonly machine = 'pc' as const
  readonly #imageKernels = new Map<string, Promise<GuestKernel>>()

  protected async kernelFor (spec: SandboxSpec): Promise<GuestKernel> {
    const found = await findImageKernel(spec.blockView!)
    if (found === undefined) return await this.hostKernel()
    const key = `${found.release}-${found.identity}`
    let p = this.#imageKernels.get(key)
    if (p === undefined) {
      p = (async () => {
        const src = await copyImageKernel(spec.blockView!, found, join(this.opts.cacheDir, 'image-kernels', key))
        return await prepareGuestKernel(src, this.opts.cacheDir)
      })()
      p.catch(() => this.#imageKernels.delete(key))
      this.#imageKernels.set(key, p)
    }
    return await p
  }
}
