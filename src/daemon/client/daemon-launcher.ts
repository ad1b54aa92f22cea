/**
 * Finding or starting the node's layerd: layerctl calls `connectDaemon()`,
 * which connects to `<home>/layerd.sock` and, when nothing answers, starts
 * layerd's holder (src/holder/: it starts layerd, keeps its FUSE
 * connections and restarts it when it dies) in the background (detached,
 * logging to `<home>/layerd.log`) and waits for layerd; `holder: false`
 * (Settings.holder: LAYERD_HOLDER=0, resolved at the roots)
 * starts layerd alone (its mounts then die with it). The client never
 * removes or rewrites the daemon's files (socket, pid file, lock): starting
 * one more daemon (or holder) is always safe, since the home's lock
 * (home-lock.ts) lets exactly one daemon run and the holder's pid file one
 * holder; a start that finds either taken exits with ALREADY_RUNNING, and
 * the client goes on waiting for the daemon that holds it. A daemon clears
 * what a killed one left, under the lock.
 *
 * May import: src/errors.ts, src/state/, this folder.
 */
import { spawn } from 'node:child_process'
import { existsSync, openSync, closeSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DaemonUnavailableError } from '../../errors.js'
import { LAYERD_EXIT } from '../../exit-codes.js'
import { ensureHomeDir } from '../../state/node-db.js'
import { ControlClient } from './control-client.js'
import { readDaemonPid, socketPath } from './control-protocol.js'

export const DAEMON_START_TIMEOUT_MS = 15_000
const POLL_MS = 10

/**
 * The daemon's entry as started (dist/layerd/layerd.cjs, found relative to this module in dist/src/daemon/): it runs
 * the one-file bundle of layerd/main.ts with its code cache (layerd/layerd.cts; `npm run build` makes both).
 */
export const DAEMON_ENTRY = fileURLToPath(new URL('../../../layerd/layerd.cjs', import.meta.url))
/** The same daemon from the unbundled modules (dist/layerd/main.js): what the bundle is made from. */
export const DAEMON_MODULES_ENTRY = fileURLToPath(new URL('../../../layerd/main.js', import.meta.url))
/** The compiled holder entry (dist/layerd/holder.js). */
export const HOLDER_ENTRY = fileURLToPath(new URL('../../../layerd/holder.js', import.meta.url))
/**
 * The holder's C front (native/holder_front.c, built by `npm run build`): it
 * starts layerd at once and the Node holder beside it, so the holder's Node
 * boot is not in series with layerd's start (bench/daemon-start.ts).
 */
export const HOLDER_FRONT = fileURLToPath(new URL('../../../../native/build/Release/layerd-holder', import.meta.url))

/**
 * Node flags of the daemon (also in layerd/main.ts's `#!` line). A 1 MiB
 * semi-space caps V8's young generation at ~3 MiB instead of growing it to
 * 48 MiB after a burst of allocation (the daemon's V8 heap: 51 → 20 MB
 * committed with one image mounted; bench/README.md, "Daemon memory").
 */
export const DAEMON_NODE_FLAGS = ['--max-semi-space-size=1']

export interface DaemonOptions {
  home: string
  /** Extra flags for a daemon started here (e.g. --cache-size). */
  args?: string[]
  /** Start the daemon when it is not running (default true). */
  autoStart?: boolean
  /** Start it under a holder (Settings.holder, LAYERD_HOLDER). Default true. */
  holder?: boolean
}

/** The pid in `<home>/layerd.pid` if that process is alive (informational: the lock decides who runs). */
export function runningDaemonPid (home: string): number | undefined {
  const pid = readDaemonPid(home)
  if (pid === undefined) return undefined
  try { process.kill(pid, 0); return pid } catch (err) { return (err as NodeJS.ErrnoException).code === 'EPERM' ? pid : undefined }
}

/** Connect to the daemon, starting it if needed. Throws DaemonUnavailableError naming the log file when it does not come up. */
export async function connectDaemon (opts: DaemonOptions): Promise<ControlClient> {
  const sock = socketPath(opts.home)
  try { return await ControlClient.connect(sock) } catch (err) {
    if (opts.autoStart === false) throw err
  }
  const started = startDaemon(opts)
  const log = join(opts.home, 'layerd.log')
  const deadline = Date.now() + DAEMON_START_TIMEOUT_MS
  let last: unknown
  while (Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, POLL_MS))
    try { return await ControlClient.connect(sock) } catch (err) { last = err }
    const code = started.exitCode
    // Our start lost the lock to another daemon: wait for that one. Any other exit is a failed start.
    if (code !== undefined && code !== LAYERD_EXIT.ALREADY_RUNNING) {
      throw new DaemonUnavailableError(`layerd exited with code ${code ?? 'null (killed by a signal)'} while starting; see ${log}`, { cause: last })
    }
  }
  const holder = runningDaemonPid(opts.home)
  throw new DaemonUnavailableError(holder === undefined
    ? `layerd did not start within ${DAEMON_START_TIMEOUT_MS} ms; see ${log}`
    : `layerd (pid ${holder}) holds ${opts.home} but does not answer on ${sock} within ${DAEMON_START_TIMEOUT_MS} ms; see ${log}`, { cause: last })
}

/**
 * The command that starts layerd under its holder at `home`: through the
 * holder's C front when it is built (`front: false`, or no front: the Node
 * holder alone, which starts layerd after its own boot). Sync.
 */
export function holderCommand (home: string, daemonArgs: string[] = [], opts: { front?: boolean, daemonEntry?: string, holderEntry?: string, holderFront?: string } = {}): { file: string, args: string[] } {
  const holder = [...DAEMON_NODE_FLAGS, opts.holderEntry ?? HOLDER_ENTRY, '--home', home, '--entry', opts.daemonEntry ?? DAEMON_ENTRY, '--', ...daemonArgs]
  const front = opts.holderFront ?? HOLDER_FRONT
  return opts.front !== false && existsSync(front) ? { file: front, args: [process.execPath, ...holder] } : { file: process.execPath, args: holder }
}

/** Start a detached layerd; `exitCode` is set if it exits while we wait (undefined while it runs). */
function startDaemon (opts: DaemonOptions): { exitCode: number | null | undefined } {
  ensureHomeDir(opts.home)
  const logFd = openSync(join(opts.home, 'layerd.log'), 'a', 0o600)
  try {
    const { file, args } = opts.holder === false
      ? { file: process.execPath, args: [...DAEMON_NODE_FLAGS, DAEMON_ENTRY, '--foreground', '--home', opts.home, ...(opts.args ?? [])] }
      : holderCommand(opts.home, opts.args)
    const child = spawn(file, args, {
      detached: true,
      stdio: ['ignore', logFd, logFd]
    })
    const state: { exitCode: number | null | undefined } = { exitCode: undefined }
    child.once('exit', code => { state.exitCode = code })
    child.unref()
    return state
  } finally {
    closeSync(logFd)
  }
}
