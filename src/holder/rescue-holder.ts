/**
 * A new holder for a layerd whose holder died (`kill -9`, the OOM killer):
 * without one, the warm standby is gone with it, the next layerd crash ends
 * every mount, and `layerctl daemon restart` has nobody to ask. So the
 * serving layerd starts a holder itself, the Node holder with
 * `--rescue PID:3` (layerd/holder.ts), detached (its own session, so it
 * outlives this layerd), with one end of a fresh socketpair as its fd 3 and
 * its stderr this layerd's (the log). The holder cannot be layerd's parent,
 * so it watches layerd through that socket: the socket's hang-up is layerd's
 * exit, and `exiting` (fd-store-protocol.ts, sent from layerd's 'exit'
 * event) gives the code a parent would have reaped.
 *
 * The command is rebuilt from this process's own: its node flags, its entry
 * (the holder starts the next layerd from it; layerd.cjs for the bundle it runs), the flags after `--home HOME`,
 * and `holder.js` beside the entry (dist/layerd/). The holder's messages are
 * queued in the socket before it has booted (HolderFdStore.handOver), so the
 * fds are out of this process at once.
 *
 * May import: src/errors.ts, src/native.ts, ./fd-stores.ts, ./fd-store-protocol.ts, node built-ins.
 */
import { spawn } from 'node:child_process'
import { closeSync, existsSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { FdStoreError, describeError } from '../errors.js'
import { nativeFdPassing } from '../native.js'
import { HolderFdStore } from './fd-stores.js'

/** Set to '0' to keep the old behaviour for tests and figures: a layerd whose holder died serves on unprotected. */
export const HOLDER_RESCUE_ENV = 'LAYERD_HOLDER_RESCUE'

export interface RescueCommand { file: string, args: string[] }

/**
 * The holder command for the running layerd `pid`, from its `argv`
 * (`node ENTRY --foreground --home HOME FLAGS…`) and node flags. Pure;
 * throws FdStoreError when argv has another shape or holder.js is missing.
 */
export function rescueCommand (pid: number, argv: string[], execArgv: string[], execPath: string, exists: (path: string) => boolean = existsSync): RescueCommand {
  const entry = argv[1]
  const at = argv.indexOf('--home')
  if (entry === undefined || argv[2] !== '--foreground' || at !== 3 || argv[4] === undefined) {
    throw new FdStoreError(`cannot start a new holder: layerd was not started as a holder starts it (argv ${JSON.stringify(argv.slice(1, 5))})`)
  }
  const holderEntry = join(dirname(entry), 'holder.js')
  if (!exists(holderEntry)) throw new FdStoreError(`cannot start a new holder: ${holderEntry} is missing`)
  // layerd.cjs runs the bundle as the main module (argv[1] becomes the bundle's path): the next layerd starts as this one did.
  const launcher = join(dirname(entry), 'layerd.cjs')
  const daemonEntry = basename(entry) === 'main.bundle.cjs' && exists(launcher) ? launcher : entry
  return { file: execPath, args: [...execArgv, holderEntry, '--home', argv[4], '--entry', daemonEntry, '--rescue', `${pid}:3`, '--', ...argv.slice(5)] }
}

/**
 * Start a holder for this process and return its fd store (nothing kept
 * yet: hand the fds over with `handOver`, then `ready`). Sync; throws
 * FdStoreError when the command or the socketpair cannot be made (the
 * spawn's own failure shows as the store going: its socket hangs up).
 */
export function startRescueHolder (log: (line: string) => void): HolderFdStore {
  const command = rescueCommand(process.pid, process.argv, process.execArgv, process.execPath)
  const native = nativeFdPassing()
  let pair: [number, number]
  try { pair = native.fdSocketPair() } catch (err) { throw new FdStoreError(`cannot start a new holder: socketpair: ${describeError(err)}`, { cause: err }) }
  const [mine, theirs] = pair
  try {
    const child = spawn(command.file, command.args, { detached: true, stdio: ['ignore', 'inherit', 'inherit', theirs] })
    child.on('error', err => log(`cannot start a new holder: ${describeError(err)}`))
    child.unref()
    log(`layerd ${process.pid}: started holder ${child.pid ?? '?'} to keep its FUSE connections`)
  } catch (err) {
    closeSync(mine)
    throw new FdStoreError(`cannot start a new holder: ${describeError(err)}`, { cause: err })
  } finally {
    closeSync(theirs)
  }
  return new HolderFdStore(mine)
}
