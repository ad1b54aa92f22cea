/**
 * layerctl's connection to the node daemon, started on demand. The store
 * location travels with every request, so one daemon serves any store.
 */
import { isAbsolute, resolve } from 'node:path'
import type { ControlClient } from '../daemon/client/control-client.js'
import { connectDaemon } from '../daemon/client/daemon-launcher.js'
import type { CommandContext } from './command.js'
import { daemonArgs, takeEarly } from './early-connect.js'

/** The daemon for this home; connected (and started, unless layerd itself runs the command) once per command, or taken from connectEarly. */
export async function daemonFor (ctx: CommandContext): Promise<ControlClient> {
  const client = await (takeEarly(ctx.settings.home) ?? connectDaemon({ home: ctx.settings.home, args: daemonArgs(ctx.settings), autoStart: !ctx.inDaemon, holder: ctx.settings.holder }))
  ctx.defer(() => client.close())
  return client
}

/** Store fields for a request. */
export function storeParams (ctx: CommandContext): { store: string, s3Endpoint?: string } {
  return { store: ctx.settings.store, ...(ctx.settings.s3Endpoint === undefined ? {} : { s3Endpoint: ctx.settings.s3Endpoint }) }
}

/** Paths go to the daemon absolute: it does not share our working directory. */
export function absolute (path: string): string {
  return isAbsolute(path) ? path : resolve(path)
}
