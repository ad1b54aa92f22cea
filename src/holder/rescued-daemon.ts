/**
 * A layerd this holder did not start and is not the parent of: the serving
 * layerd whose own holder died started this one (`--rescue PID:FD`,
 * rescue-holder.ts). No pidfd wait can reap a process that is not a child,
 * so its end is seen on the fd socket: the holder reports the socket's
 * hang-up (`ended`), which comes only once the process has exited (layerd
 * keeps its end for its whole life, close-on-exec, so no child of it holds
 * one). Its exit code, when it exited rather than was killed, arrived
 * just before as `exiting` (`exitingWith`); without one, the exit is
 * reported as a SIGKILL, which is what a layerd that sent nothing suffered
 * or as good as (a crash: the holder restarts it).
 *
 * May import: node built-ins, ./adopted-daemon.ts (types).
 */
import { EventEmitter } from 'node:events'
import type { DaemonProcess } from './adopted-daemon.js'

export class RescuedDaemon extends EventEmitter implements DaemonProcess {
  readonly pid: number
  exitCode: number | null = null
  signalCode: NodeJS.Signals | null = null
  #said: number | undefined

  /** Throws Error when no process `pid` exists. Sync. */
  constructor (pid: number) {
    super()
    process.kill(pid, 0) // ESRCH: nothing to hold
    this.pid = pid
  }

  /** layerd said it exits with `code` (fd-store-protocol.ts `exiting`). */
  exitingWith (code: number): void { this.#said = code }

  /** Its socket hung up: it has exited. Emits 'exit' once. */
  ended (): void {
    if (this.exitCode !== null || this.signalCode !== null) return
    if (this.#said !== undefined) this.exitCode = this.#said
    else this.signalCode = 'SIGKILL'
    this.emit('exit', this.exitCode, this.signalCode)
  }

  /** Signal it while its socket is open (after that its pid may be someone else's). Sync; false when it could not be signalled. */
  kill (signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.exitCode !== null || this.signalCode !== null) return false
    try { process.kill(this.pid, signal); return true } catch { return false }
  }
}
