#!/usr/bin/env node
/**
 * layerd-holder: keeps layerd's FUSE connections alive across its crashes
 * and upgrades, and restarts it (src/holder/holder.ts). Started by
 * layerctl's daemon launcher, detached, logging to `<home>/layerd.log`.
 *
 *   layerd-holder --home DIR [--entry LAYERD_MAIN_JS] [-- LAYERD_FLAGS…]
 *
 * Exit codes: HOLDER_EXIT (src/exit-codes.ts).
 */
import { parseArgs } from 'node:util'
import { fileURLToPath } from 'node:url'
import { HolderError, describeError } from '../src/errors.js'
import { HOLDER_EXIT } from '../src/exit-codes.js'
import { Holder } from '../src/holder/holder.js'
import { resolveSettings } from '../src/state/settings.js'

const USAGE = 'usage: layerd-holder --home DIR [--entry LAYERD_MAIN_JS] [-- LAYERD_FLAGS...]'

async function main (): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({ options: { home: { type: 'string' }, entry: { type: 'string' } }, allowPositionals: true })
  } catch (err) {
    console.error(`layerd-holder: ${describeError(err)}; ${USAGE}`)
    return HOLDER_EXIT.USAGE
  }
  const { home, entry } = parsed.values
  if (home === undefined) { console.error(`layerd-holder: --home is required; ${USAGE}`); return HOLDER_EXIT.USAGE }
  const log = (line: string): void => { process.stderr.write(`${new Date().toISOString()} ${line}\n`) }
  const holder = new Holder({
    home,
    daemonEntry: entry ?? fileURLToPath(new URL('./layerd.cjs', import.meta.url)),
    daemonArgs: parsed.positionals,
    warmStandby: resolveSettings({ home }).warmStandby,
    log
  })
  try {
    await holder.start()
  } catch (err) {
    log(`holder: cannot start: ${describeError(err)}`)
    return err instanceof HolderError ? HOLDER_EXIT.ALREADY_RUNNING : HOLDER_EXIT.FAILURE
  }
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => { log(`holder: ${signal}: stopping layerd`); void holder.stop() })
  }
  // The holder must outlive anything odd in its own code: log, keep holding.
  process.on('uncaughtException', err => log(`holder: uncaught: ${err.stack ?? String(err)}`))
  process.on('unhandledRejection', err => log(`holder: unhandled rejection: ${describeError(err)}`))
  return await holder.finished
}

process.exit(await main())
