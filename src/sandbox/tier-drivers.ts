/**
 * The driver for each tier, made once per process (drivers hold compiled
 * seccomp filters and probe the host once).
 *
 * May import: src/runtime/.
 */
import { ContainerTierDriver } from '../runtime/container/container-driver.js'
import type { OciRuntimeName } from '../runtime/container/oci-runtime.js'
import { ProcessTierDriver } from '../runtime/process/process-driver.js'
import type { Tier, TierDriver } from '../runtime/sandbox.js'
import { MicrovmTierDriver, VmTierDriver } from '../runtime/vm/vm-drivers.js'

export interface DriverOptions {
  /** OCI runtime for the container tier. Default runc. */
  runtime?: OciRuntimeName
}

const drivers = new Map<string, TierDriver>()

export function driverFor (tier: Tier, opts: DriverOptions = {}): TierDriver {
  const key = `${tier}/${opts.runtime ?? ''}`
  let d = drivers.get(key)
  if (d === undefined) {
    switch (tier) {
      case 'process': d = new ProcessTierDriver(); break
      case 'container': d = new ContainerTierDriver({ runtime: opts.runtime ?? 'runc' }); break
      case 'microvm': d = new MicrovmTierDriver(); break
      case 'vm': d = new VmTierDriver(); break
    }
    drivers.set(key, d)
  }
  return d
}
