#!/usr/bin/env node
/**
 * layerd-holder: keeps layerd's FUSE connections alive across its crashes
 * and upgrades, and restarts it (src/holder/holder.ts). Started by
 * layerctl's daemon launcher, detached, logging to `<home>/layerd.log`.
 *
 *   layerd-holder --home DIR [--entry LAYERD_MAIN_JS] [--adopt PID:FD [--nice-back N] | --rescue PID:FD] [-- LAYERD_FLAGS…]
 *
 * `--adopt` is given by the holder's C front (native/holder_front.c), which
 * started the first layerd (pid PID, this process's child) with the other
 * end of the socketpair FD before it became this process by exec; with
 * `--nice-back`, it booted this process nicer than layerd, and the holder
 * goes back to nice N first thing. `--rescue` is given by a serving layerd
 * (pid PID) whose holder died (src/holder/rescue-holder.ts): FD is this
 * holder's end of its new socketpair, and that layerd is its current one.
 *
 * Exit codes: HOLDER_EXIT (src/exit-codes.ts).
 */
import { parseArgs } from 'node:util'
import { fileURLToPath } from 'node:url'
import { BadInputError, HolderError, describeError } from '../src/errors.js'
import { HOLDER_EXIT } from '../src/exit-codes.js'
import { Holder } from '../src/holder/holder.js'
import { resolveSettings } from '../src/state/settings.js'
import { createLogger } from '../src/metrics/logger.js'

const USAGE = 'usage: layerd-holder --home DIR [--entry LAYERD_MAIN_JS] [--adopt PID:FD [--nice-back N] | --rescue PID:FD] [-- LAYERD_FLAGS...]'

// From the moment this module runs: a SIGTERM or SIGINT while the holder starts (the front's layerd may serve
// already) stops both once it has started, instead of ending this process alone and leaving that layerd unprotected.
let stopOnStart: NodeJS.Signals | undefined
let stopHolder: ((signal: NodeJS.Signals) => void) | undefined
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => { if (stopHolder === undefined) stopOnStart ??= signal; else stopHolder(signal) })
}

async function main (): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({ options: { home: { type: 'string' }, entry: { type: 'string' }, adopt: { type: 'string' }, rescue: { type: 'string' }, 'nice-back': { type: 'string' } }, allowPositionals: true })
  } catch (err) {
    console.error(`layerd-holder: ${describeError(err)}; ${USAGE}`)
    return HOLDER_EXIT.USAGE
  }
  const { home, entry, adopt } = parsed.values
  if (home === undefined) { console.error(`layerd-holder: --home is required; ${USAGE}`); return HOLDER_EXIT.USAGE }
  const adopted = adopt === undefined ? undefined : /^([1-9][0-9]*):([0-9]+)$/.exec(adopt)
  if (adopted === null) { console.error(`layerd-holder: --adopt ${JSON.stringify(adopt)} is not PID:FD; ${USAGE}`); return HOLDER_EXIT.USAGE }
  const rescueFlag = parsed.values.rescue
  const rescue = rescueFlag === undefined ? undefined : /^([1-9][0-9]*):([0-9]+)$/.exec(rescueFlag)
  if (rescue === null) { console.error(`layerd-holder: --rescue ${JSON.stringify(rescueFlag)} is not PID:FD; ${USAGE}`); return HOLDER_EXIT.USAGE }
  if (rescue !== undefined && adopted !== undefined) { console.error(`layerd-holder: --adopt and --rescue exclude each other; ${USAGE}`); return HOLDER_EXIT.USAGE }
  const niceBackFlag = parsed.values['nice-back']
  const niceBack = niceBackFlag === undefined ? undefined : Number(niceBackFlag)
  if (niceBack !== undefined && !(Number.isInteger(niceBack) && niceBack >= -20 && niceBack <= 19)) {
    console.error(`layerd-holder: --nice-back ${JSON.stringify(niceBackFlag)} is not a nice value (-20 to 19); ${USAGE}`)
    return HOLDER_EXIT.USAGE
  }
  // The same text lines as layerd's own log, which it shares (<home>/layerd.log).
  const log = createLogger('text', 'info')
  const holder = new Holder({
    home,
    daemonEntry: entry ?? fileURLToPath(new URL('./layerd.cjs', import.meta.url)),
    daemonArgs: parsed.positionals,
    warmStandby: resolveSettings({ home }).warmStandby,
    ...(adopted === undefined ? {} : { adopt: { pid: Number(adopted[1]), sock: Number(adopted[2]) } }),
    ...(niceBack === undefined ? {} : { niceBack }),
    ...(rescue === undefined ? {} : { rescue: { pid: Number(rescue[1]), sock: Number(rescue[2]) } }),
    log
  })
  try {
    await holder.start()
  } catch (err) {
    log(`holder: cannot start: ${describeError(err)}`, 'warn')
    return err instanceof HolderError ? HOLDER_EXIT.ALREADY_RUNNING : err instanceof BadInputError ? HOLDER_EXIT.USAGE : HOLDER_EXIT.FAILURE
  }
  stopHolder = signal => { log(`holder: ${signal}: stopping layerd`); void holder.stop() }
  if (stopOnStart !== undefined) stopHolder(stopOnStart)
  // The holder must outlive anything odd in its own code: log, keep holding.
  process.on('uncaughtException', err => log(`holder: uncaught: ${err.stack ?? String(err)}`, 'error'))
  process.on('unhandledRejection', err => log(`holder: unhandled rejection: ${describeError(err)}`, 'warn'))
  return await holder.finished
}

process.exit(await main())
