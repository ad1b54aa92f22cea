/** Placeholder wiring until the VM tiers land: a clear error, never a fake. */
import { UnsupportedError } from '../errors.js'
import type { Tier, TierDriver } from '../runtime/sandbox.js'

export function vmTierDriver (tier: Extract<Tier, 'microvm' | 'vm'>): TierDriver {
  const why = `the ${tier} tier is not wired into createSandbox yet`
  return {
    tier,
    unavailableReason: async () => why,
    create: async () => { throw new UnsupportedError(why) }
  }
}
