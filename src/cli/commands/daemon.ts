/**
 * `layerctl daemon status` and `layerctl daemon restart`: the node daemon
 * and its holder (src/holder/README.md). `restart` is a planned upgrade:
 * the holder has the running layerd hand every FUSE connection over to a
 * new one started from this layerctl's build (new code from disk), and
 * answers once the new one serves; no read fails meanwhile.
 */
import { UsageError } from '../../errors.js'
import { DAEMON_ENTRY, connectDaemon } from '../../daemon/client/daemon-launcher.js'
import { callHolder } from '../../holder/holder-client.js'
import type { HolderStatus } from '../../holder/holder-control-server.js'
import type { Command } from '../command.js'

const USAGE = 'layerctl daemon status | layerctl daemon restart [--entry LAYERD_MAIN_JS]'

function uptime (since: string): string {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(since)) / 1000))
  return s < 120 ? `${s} s` : s < 7200 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`
}

export const daemonCommand: Command = {
  name: 'daemon',
  summary: 'show layerd, its holder and its mounts (status), or restart layerd from this build without disturbing any mount (restart)',
  usage: USAGE,
  options: { entry: { type: 'string' } },
  async run (ctx, { values, positionals }) {
    const [sub, ...rest] = positionals
    if (rest.length !== 0 || (sub !== 'status' && sub !== 'restart')) throw new UsageError(`usage: ${USAGE}`)
    const home = ctx.settings.home
    if (sub === 'restart') {
      const entry = (values.entry as string | undefined) ?? DAEMON_ENTRY
      const r = await callHolder(home, 'restart', { entry })
      ctx.out(ctx.json ? JSON.stringify(r) : `layerd ${r.oldPid ?? '?'} handed over to layerd ${r.newPid} (${entry}) in ${r.ms} ms`)
      return 0
    }
    const holder: HolderStatus | undefined = await callHolder(home, 'status', {}, 5_000).catch(() => undefined)
    const client = await connectDaemon({ home, autoStart: false })
    ctx.defer(() => client.close())
    const ping = await client.call('ping')
    const mounts = await client.call('mounts')
    if (ctx.json) {
      ctx.out(JSON.stringify({ daemon: ping, holder: holder ?? null, mounts }))
      return 0
    }
    ctx.out(`layerd     pid ${ping.pid}, up ${uptime(ping.startedAt)}, home ${ping.home}`)
    ctx.out(holder === undefined
      ? `holder     none: ${ping.connectionsKeptBy === 'systemd' ? "FUSE connections are kept in systemd's fd store" : 'mounts die with layerd'}`
      : `holder     pid ${holder.holderPid}, up ${uptime(holder.startedAt)}, ${holder.keptFds} FUSE connection(s) kept, layerd restarted ${holder.restarts + holder.plannedRestarts} time(s) (${holder.restarts} after a crash, ${holder.plannedRestarts} planned), ` +
        (holder.standbyPid === null ? 'no warm standby' : `warm standby pid ${holder.standbyPid}`))
    ctx.out(`mounts     ${mounts.length}`)
    for (const m of mounts) ctx.out(`  ${m.mountpoint}  ${m.image}`)
    return 0
  }
}
