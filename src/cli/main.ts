/**
 * layerctl's entry: global flags, command dispatch, and the single place
 * where errors become one line on stderr and an exit code.
 *
 * Exit codes: 0 success, 1 failure, 2 usage error.
 */
import { parseArgs } from 'node:util'
import { LayerdError, UsageError, describeError } from '../errors.js'
import { openStore } from '../store/open-store.js'
import type { ObjectStore } from '../store/object-store.js'
import { openNodeDb, type NodeDb } from '../state/node-db.js'
import type { Command, CommandArgs, CommandContext, CommandStdio, OptionSpec } from './command.js'
import { commands } from './commands/index.js'
import { resolveSettings, type Settings } from '../state/settings.js'

export const EXIT_OK = 0
export const EXIT_FAILURE = 1
export const EXIT_USAGE = 2

export const GLOBAL_OPTIONS: OptionSpec = {
  store: { type: 'string' },
  's3-endpoint': { type: 'string' },
  home: { type: 'string' },
  json: { type: 'boolean' },
  debug: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' }
}

export interface MainIo {
  stdout: (line: string) => void
  stderr: (line: string) => void
  stderrIsTTY: boolean
  env: NodeJS.ProcessEnv
  /** Streamed output (CommandContext.stdio); default this process's stdout and stderr. */
  stdio?: CommandStdio
  /** CommandContext.onCallerGone; default SIGINT/SIGTERM, then exit 130. */
  onCallerGone?: CommandContext['onCallerGone']
  /** layerd runs this command (CommandContext.inDaemon). */
  inDaemon?: boolean
}

const defaultIo: MainIo = {
  stdout: line => process.stdout.write(line + '\n'),
  stderr: line => process.stderr.write(line + '\n'),
  stderrIsTTY: process.stderr.isTTY === true,
  env: process.env
}

/** The caller of a layerctl process is gone when it is interrupted: clean up, then exit as interrupted. */
function onSignals (fn: () => Promise<void>): () => void {
  const gone = (): void => { void fn().finally(() => process.exit(130)) }
  process.once('SIGINT', gone).once('SIGTERM', gone)
  return () => { process.off('SIGINT', gone).off('SIGTERM', gone) }
}

/**
 * The command `argv` names and its settings, as main() would resolve them,
 * or undefined when main() would refuse the arguments. Sync; never throws.
 * The run socket uses it to serve only what it may (run-socket-commands.ts) for its own home.
 */
export function commandSettings (argv: string[], env: NodeJS.ProcessEnv): { command: string, args: CommandArgs, settings: Settings, homeGiven?: string } | undefined {
  const index = argv.findIndex(a => !a.startsWith('-'))
  const command = commands.find(c => c.name === argv[index])
  if (command === undefined) return undefined
  try {
    const args = parseCommandArgs(command, [...argv.slice(0, index), ...argv.slice(index + 1)])
    const homeGiven = (args.values.home as string | undefined) ?? env.LAYERD_HOME
    return { command: command.name, args, settings: resolveSettings(args.values as Record<string, string>, env), ...(homeGiven === undefined ? {} : { homeGiven }) }
  } catch { return undefined }
}

/** Run layerctl with `argv` (without node and script). Resolves to the exit code; never throws. */
export async function main (argv: string[], io: MainIo = defaultIo): Promise<number> {
  const index = argv.findIndex(a => !a.startsWith('-'))
  const name = index === -1 ? undefined : argv[index]
  const rest = index === -1 ? argv : [...argv.slice(0, index), ...argv.slice(index + 1)]
  const debug = argv.includes('--debug')
  if (name === undefined || name === 'help') {
    io.stdout(usage(argv[index + 1]))
    return name === undefined && !argv.includes('--help') && !argv.includes('-h') ? EXIT_USAGE : EXIT_OK
  }
  const command = commands.find(c => c.name === name)
  if (command === undefined) {
    io.stderr(`layerctl: unknown command ${JSON.stringify(name)}; run \`layerctl help\` for the list`)
    return EXIT_USAGE
  }
  const deferred: Array<() => Promise<void> | void> = []
  try {
    const { values, positionals } = parseCommandArgs(command, rest)
    if (values.help === true) { io.stdout(commandHelp(command)); return EXIT_OK }
    const settings = resolveSettings(values as Record<string, string>, io.env)
    let store: ObjectStore | undefined
    let db: NodeDb | undefined
    const ctx: CommandContext = {
      settings,
      env: io.env,
      json: values.json === true,
      debug,
      out: io.stdout,
      err: io.stderr,
      progressTTY: io.stderrIsTTY && values.json !== true,
      store: () => {
        if (store === undefined) {
          store = openStore(settings.store, settings.s3Endpoint === undefined ? {} : { s3Endpoint: settings.s3Endpoint })
          const s = store
          deferred.push(() => s.close())
        }
        return store
      },
      db: () => {
        if (db === undefined) {
          db = openNodeDb(settings.home)
          const d = db
          deferred.push(() => { d.close() })
        }
        return db
      },
      defer: fn => { deferred.push(fn) },
      stdio: io.stdio ?? { stdout: process.stdout, stderr: process.stderr },
      onCallerGone: io.onCallerGone ?? onSignals,
      inDaemon: io.inDaemon === true
    }
    return (await command.run(ctx, { values, positionals })) ?? EXIT_OK
  } catch (err) {
    io.stderr(`layerctl ${name}: ${describeError(err)}`)
    for (let e: unknown = err; debug && e instanceof Error; e = e.cause) io.stderr(`${e === err ? '' : 'caused by: '}${e.stack ?? e.message}`)
    return command.failureExitCode ?? (err instanceof UsageError ? EXIT_USAGE : EXIT_FAILURE)
  } finally {
    for (const fn of deferred.reverse()) {
      try { await fn() } catch (err) { if (debug) io.stderr(`layerctl: while closing: ${describeError(err)}`) }
    }
  }
}

function parseCommandArgs (command: Command, args: string[]): { values: Record<string, any>, positionals: string[] } {
  try {
    return parseArgs({ args, options: { ...GLOBAL_OPTIONS, ...command.options }, allowPositionals: true, strict: true })
  } catch (err) {
    if (err instanceof LayerdError) throw err
    throw new UsageError(`${(err as Error).message.split('\n')[0]}; usage: ${command.usage}`, { cause: err })
  }
}

function usage (topic?: string): string {
  const c = commands.find(x => x.name === topic)
  if (c !== undefined) return commandHelp(c)
  const width = Math.max(...commands.map(x => x.name.length))
  return [
    'usage: layerctl COMMAND [options]',
    '',
    'Commands:',
    ...commands.map(x => `  ${x.name.padEnd(width)}  ${x.summary}`),
    '',
    'Global options:',
    '  --store URL         object store: file:///path (default: $LAYERD_HOME/store) or s3://bucket/prefix (env LAYERD_STORE)',
    '  --s3-endpoint URL   S3 endpoint for s3:// stores, path-style (env LAYERD_S3_ENDPOINT)',
    '  --home DIR          node-local state (env LAYERD_HOME; default /var/lib/layerd as root)',
    '  --json              machine-readable output',
    '  --debug             stack traces on errors'
  ].join('\n')
}

function commandHelp (c: Command): string {
  return `usage: ${c.usage}\n\n${c.summary}`
}
