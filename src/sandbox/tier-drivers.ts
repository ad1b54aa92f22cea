/**
 * The driver for each tier, made once per process (drivers hold compiled
 * seccomp filters and probe the host once).
 *
 * May import: src/runtime/, src/state/settings.ts.
 */
import { ContainerTierDriver } from '../runtime/container/container-driver.js'
import type { OciRuntimeName } from '../runtime/container/oci-runtime.js'
import { ProcessTierDriver } from '../runtime/process/process-driver.js'
import type { Tier, TierDriver } from '../runtime/sandbox.js'
import { MicrovmTierDriver, VmTierDriver, type VmDriverOptions } from '../runtime/vm/vm-drivers.js'
import type { VmSettings } from '../state/settings.js'

export interface DriverOptions {
  /** OCI runtime for the container tier. Default runc. */
  runtime?: OciRuntimeName
  /** The VM tiers' kernel and accelerator settings (resolved by the caller: src/state/settings.ts). */
  vm?: VmSettings
  /** The cgroup (inside each v1 hierarchy) that process and container sandboxes' groups go under. Default 'layerd'. */
  cgroupParent?: string
}

const drivers = new Map<string, TierDriver>()

function vmDriverOptions (vm: VmSettings = {}): VmDriverOptions {
  const { accel, ...kernelSearch } = vm
  return { kernelSearch, ...(accel === undefined ? {} : { accel }) }
}

export function driverFor (tier: Tier, opts: DriverOptions = {}): TierDriver {
  const key = `${tier}/${opts.runtime ?? ''}/${JSON.stringify(opts.vm ?? {})}/${opts.cgroupParent ?? ''}`
  let d = drivers.get(key)
  if (d === undefined) {
    switch (tier) {
      case 'process': d = new ProcessTierDriver(opts.cgroupParent === undefined ? {} : { cgroupParent: opts.cgroupParent }); break
      case 'container': d = new ContainerTierDriver({ runtime: opts.runtime ?? 'runc', ...(opts.cgroupParent === undefined ? {} : { cgroupParent: opts.cgroupParent }) }); break
      case 'microvm': d = new MicrovmTierDriver(vmDriverOptions(opts.vm)); break
      case 'vm': d = new VmTierDriver(vmDriverOptions(opts.vm)); break
    }
    drivers.set(key, d)
  }
  return d
}
