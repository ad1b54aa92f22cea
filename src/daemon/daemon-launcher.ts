/**
 * Finding or starting the node's layerd: layerctl calls `connectDaemon()`,
 * which connects to `<home>/layerd.sock` and, when nothing answers, starts
 * layerd's holder (src/holder/: it starts layerd, keeps its FUSE
 * connections and restarts it when it dies) in the background (detached,
 * logging to `<home>/layerd.log`) and waits for layerd. LAYERD_HOLDER=0
 * starts layerd alone (its mounts then die with it). A stale socket or pid
 * file from a killed daemon is cleared.
 *
 * May import: src/errors.ts, src/state/, src/holder/holder.ts, this folder.
 */
import { spawn } from 'node:child_process'
import { openSync, closeSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DaemonUnavailableError } from '../errors.js'
import { ensureHomeDir } from '../state/node-db.js'
import { ControlClient } from './control-client.js'
import { pidFilePath, socketPath } from './control-protocol.js'
import { holderPidIn } from '../holder/holder.js'

export const DAEMON_START_TIMEOUT_MS = 15_000
const POLL_MS = 50

/** The compiled daemon entry (dist/layerd/main.js), found relative to this module (dist/src/daemon/). */
export const DAEMON_ENTRY = fileURLToPath(new URL('../../layerd/main.js', import.meta.url))
/** The compiled holder entry (dist/layerd/holder.js). */
export const HOLDER_ENTRY = fileURLToPath(new URL('../../layerd/holder.js', import.meta.url))

export interface DaemonOptions {
  home: string
  /** Extra flags for a daemon started here (e.g. --cache-size). */
  args?: string[]
  /** Start the daemon when it is not running (default true). */
  autoStart?: boolean
}

/** The pid in `<home>/layerd.pid` if that process is alive. */
export function runningDaemonPid (home: string): number | undefined {
  let pid: number
  try { pid = Number(readFileSync(pidFilePath(home), 'utf8').trim()) } catch { return undefined }
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined
  try { process.kill(pid, 0); return pid } catch { return undefined }
}

/** Connect to the daemon, starting it if needed. Throws DaemonUnavailableError naming the log file when it does not come up. */
export async function connectDaemon (opts: DaemonOptions): Promise<ControlClient> {
  const sock = socketPath(opts.home)
  try { return await ControlClient.connect(sock) } catch (err) {
    if (opts.autoStart === false) throw err
  }
  if (runningDaemonPid(opts.home) === undefined && holderPidIn(opts.home) === undefined) {
    rmSync(pidFilePath(opts.home), { force: true })
    startDaemon(opts)
  }
  const log = join(opts.home, 'layerd.log')
  const deadline = Date.now() + DAEMON_START_TIMEOUT_MS
  let last: unknown
  while (Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, POLL_MS))
    try { return await ControlClient.connect(sock) } catch (err) { last = err }
  }
  throw new DaemonUnavailableError(`layerd did not start within ${DAEMON_START_TIMEOUT_MS} ms; see ${log}`, { cause: last })
}

function startDaemon (opts: DaemonOptions): void {
  ensureHomeDir(opts.home)
  const logFd = openSync(join(opts.home, 'layerd.log'), 'a', 0o600)
  try {
    const args = process.env.LAYERD_HOLDER === '0'
      ? [DAEMON_ENTRY, '--foreground', '--home', opts.home, ...(opts.args ?? [])]
      : [HOLDER_ENTRY, '--home', opts.home, '--entry', DAEMON_ENTRY, '--', ...(opts.args ?? [])]
    const child = spawn(process.execPath, args, {
      detached: true,
      stdio: ['ignore', logFd, logFd]
    })
    child.unref()
  } finally {
    closeSync(logFd)
  }
}
