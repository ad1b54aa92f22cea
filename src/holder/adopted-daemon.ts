/**
 * A layerd the holder did not spawn itself but inherited: the holder's C
 * front (native/holder_front.c) forks layerd and then becomes the Node
 * holder by exec, so that layerd is this process's child from the start
 * while the holder's own Node boot runs beside it. libuv reaps only the
 * children it started, so this one's exit is watched on a pidfd
 * (`childWatchExit`, native/spawn.c), and it is seen through the slice of
 * ChildProcess the holder uses (`DaemonProcess`).
 *
 * May import: src/native.ts.
 */
import { EventEmitter } from 'node:events'
import { constants } from 'node:os'
import { nativeChildWatchExit } from '../native.js'

/** What the holder uses of a layerd process: ChildProcess has it, and so does AdoptedDaemon. */
export interface DaemonProcess {
  readonly pid?: number | undefined
  readonly exitCode: number | null
  readonly signalCode: NodeJS.Signals | null
  kill: (signal?: NodeJS.Signals) => boolean
  on: ((event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void) => unknown) &
  ((event: 'error', listener: (err: Error) => void) => unknown)
}

const SIGNAL_NAMES = new Map(Object.entries(constants.signals).map(([name, n]) => [n, name as NodeJS.Signals]))

/** A child of this process started before it became the holder; emits 'exit' (code, signal) once, as ChildProcess does. */
export class AdoptedDaemon extends EventEmitter implements DaemonProcess {
  readonly pid: number
  exitCode: number | null = null
  signalCode: NodeJS.Signals | null = null

  /**
   * Start watching child `pid` (sync). Throws errno errors (ECHILD: not a
   * child of this process, a bad --adopt), UnsupportedError when the addon
   * has no childWatchExit.
   */
  constructor (pid: number) {
    super()
    this.pid = pid
    nativeChildWatchExit()(pid, (code, signal) => {
      // Reaped just now, in this tick: kill() sees the codes before the pid can be anyone else's.
      this.exitCode = signal === 0 ? code : null
      this.signalCode = signal === 0 ? null : SIGNAL_NAMES.get(signal) ?? 'SIGKILL'
      this.emit('exit', this.exitCode, this.signalCode)
    })
  }

  /** Signal the child unless it has been reaped (its pid may be someone else's then). Sync; false when it could not be signalled. */
  kill (signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.exitCode !== null || this.signalCode !== null) return false
    try { process.kill(this.pid, signal); return true } catch { return false }
  }
}
