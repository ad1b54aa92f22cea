/**
 * `layerctl mount` on a cold node: the daemon is started before the rest of
 * layerctl loads. cli/layerctl.ts calls `connectEarly(argv)` first thing;
 * layerd's start (two Node processes, the holder's and layerd's) then
 * overlaps layerctl's own module loading instead of following it.
 * daemonFor takes the connection when its home matches (`takeEarly`).
 * Only `mount` connects early: other commands start the daemon, if at all,
 * when they need it.
 *
 * May import: src/daemon/ (the launcher), src/state/ (settings).
 */
import type { ControlClient } from '../daemon/client/control-client.js'
import { connectDaemon } from '../daemon/client/daemon-launcher.js'
import { resolveSettings, type Settings } from '../state/settings.js'

const EARLY_COMMANDS = new Set(['mount'])

let early: { home: string, client: Promise<ControlClient> } | undefined

/** The flags a daemon started for `settings` gets. */
export function daemonArgs (settings: Pick<Settings, 'cacheSize'>): string[] {
  return settings.cacheSize === undefined ? [] : ['--cache-size', settings.cacheSize]
}

/** The value of `--home DIR` or `--home=DIR` in `argv`, if any. */
function homeFlag (argv: string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--home') return argv[i + 1]
    if (argv[i]!.startsWith('--home=')) return argv[i]!.slice('--home='.length)
  }
  return undefined
}

/**
 * For a command in EARLY_COMMANDS (not `--help`), begin connecting to the
 * daemon of its home, starting it if nothing answers. Sync; never throws:
 * bad flags and a daemon that does not come up are the command's to report.
 */
export function connectEarly (argv: string[], env: NodeJS.ProcessEnv = process.env): void {
  const name = argv.find(a => !a.startsWith('-'))
  if (name === undefined || !EARLY_COMMANDS.has(name) || argv.includes('--help') || argv.includes('-h')) return
  let settings: Settings
  try {
    const home = homeFlag(argv)
    settings = resolveSettings(home === undefined ? {} : { home }, env)
  } catch { return }
  const client = connectDaemon({ home: settings.home, args: daemonArgs(settings), holder: settings.holder })
  client.catch(() => {}) // takeEarly's caller sees the error
  early = { home: settings.home, client }
}

/** The early connection if it was begun for `home` (once), else undefined. */
export function takeEarly (home: string): Promise<ControlClient> | undefined {
  if (early === undefined || early.home !== home) return undefined
  const { client } = early
  early = undefined
  return client
}

/** Close an early connection no command took (a usage error, say), so that the process can exit. Async; never throws. */
export async function closeEarly (): Promise<void> {
  const e = early
  early = undefined
  if (e !== undefined) (await e.client.catch(() => undefined))?.close()
}
