/**
 * Starting one layerd as the holder's child: the holder's node flags, the
 * entry given, `--foreground --home HOME` and the daemon's flags; one end of
 * a fresh SOCK_SEQPACKET socketpair as its fd 3 (LAYERD_HOLDER_FD,
 * fd-store-protocol.ts), the other end kept by the holder.
 *
 * A layerd that only prepares while another serves (a warm standby, a
 * planned restart's new one) runs PREPARING_NICE_STEP nicer until it takes
 * over (LAYERD_SERVE_NICE tells it the value to go back to), so its loading
 * does not slow the serving one's reads. Root only: going back needs
 * CAP_SYS_NICE.
 *
 * May import: src/errors.ts, src/native.ts (types), ./fd-store-protocol.ts, node built-ins.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync } from 'node:fs'
import { getPriority, setPriority } from 'node:os'
import { describeError } from '../errors.js'
import type { NativeFdPassing } from '../native.js'
import { HOLDER_FD_ENV, HOLDER_SERVE_NICE_ENV, HOLDER_STANDBY_ENV } from './fd-store-protocol.js'
import type { LogLine } from '../log-line.js'

const PREPARING_NICE_STEP = 10

/** What a layerd is started as: it serves now, it is a planned restart's next one, or a warm standby. */
export type LayerdRole = 'current' | 'next' | 'standby'

export interface LayerdChildOptions {
  /** layerd's entry script. */
  entry: string
  home: string
  /** Flags after `--foreground --home HOME`. */
  daemonArgs: string[]
  role: LayerdRole
  native: Pick<NativeFdPassing, 'fdSocketPair'>
  log: LogLine
}

/** The child and the holder's end of its fd socket. Sync (the spawn's own errors arrive as the child's 'error'). */
export function startLayerdChild ({ entry, home, daemonArgs, role, native, log }: LayerdChildOptions): { child: ChildProcess, sock: number } {
  const serveNice = role !== 'current' && process.getuid?.() === 0 ? getPriority() : undefined
  const [mine, theirs] = native.fdSocketPair()
  let child: ChildProcess
  try {
    // The holder's own node flags (the daemon's: DAEMON_NODE_FLAGS, passed by the launcher) go on to layerd.
    child = spawn(process.execPath, [...process.execArgv, entry, '--foreground', '--home', home, ...daemonArgs], {
      stdio: ['ignore', 'inherit', 'inherit', theirs],
      env: { ...process.env, [HOLDER_FD_ENV]: '3', ...(role === 'standby' ? { [HOLDER_STANDBY_ENV]: '1' } : {}), ...(serveNice === undefined ? {} : { [HOLDER_SERVE_NICE_ENV]: String(serveNice) }) }
    })
  } finally {
    closeSync(theirs)
  }
  // Its main thread, at once: the threads it starts from there on inherit it; it sets them all back when it takes over.
  if (serveNice !== undefined && child.pid !== undefined) {
    try { setPriority(child.pid, Math.min(19, serveNice + PREPARING_NICE_STEP)) } catch (err) { log(`holder: cannot nice layerd ${child.pid}: ${describeError(err)}`, 'warn') }
  }
  return { child, sock: mine }
}
