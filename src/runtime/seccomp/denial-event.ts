/**
 * What a recorded denial is, and where a sandbox's denials go. Shared by the
 * supervisor that makes them (`denial-supervisor.ts`), the tiers that start
 * it, and whoever stores them (src/state/denial-table.ts, through the
 * library API).
 *
 * Pure types. Imports nothing.
 */

/** One refused attempt. `hook` is the wall and call (`seccomp:mount`); `object` what it was aimed at. */
export interface DenialEvent {
  /** ISO 8601. */
  time: string
  sandbox: string
  image: string
  tier: 'process' | 'container'
  hook: string
  object: string
  comm: string
  /** The caller's pid inside the sandbox's pid namespace (-1 when it was gone before it could be read). */
  pid: number
  /** The call's six arguments, hex. */
  args: string[]
}

export type DenialContext = Pick<DenialEvent, 'sandbox' | 'image' | 'tier'>

/** Where a sandbox's denials go. Both calls are sync and must not throw (a failing store loses the record only). */
export interface DenialSink {
  record: (e: DenialEvent) => void
  /** Events not recorded (rate limit, full queue), reported once when a command's supervisor ends. */
  dropped: (who: DenialContext, count: number) => void
}
