/**
 * The shape of a layerctl command and the context it runs in. Commands are
 * thin: they parse their arguments, call into src/, and print.
 */
import type { Writable } from 'node:stream'
import type { ParseArgsConfig } from 'node:util'
import type { Settings } from '../state/settings.js'
import type { ObjectStore } from '../store/object-store.js'
import type { NodeDb } from '../state/node-db.js'

export type OptionSpec = NonNullable<ParseArgsConfig['options']>

export interface CommandArgs {
  values: Record<string, string | boolean | string[] | undefined>
  positionals: string[]
}

export interface CommandContext {
  settings: Settings
  /** The caller's environment: this process's, or what the run socket's client sent (run-socket-commands.ts). */
  env: NodeJS.ProcessEnv
  /** `--json`: print machine-readable output on stdout. */
  json: boolean
  /** `--debug`: print stacks and extra detail. */
  debug: boolean
  out: (line: string) => void
  err: (line: string) => void
  /** stderr is a terminal: progress displays are allowed. */
  progressTTY: boolean
  /** The store from settings, opened on first use. */
  store: () => ObjectStore
  /** The node database under home, opened on first use. */
  db: () => NodeDb
  /** Run `fn` when the command ends (close handles). */
  defer: (fn: () => Promise<void> | void) => void
  /** Where a command's streamed output goes (a sandbox's stdout and stderr): this process's, or the run socket's client. */
  stdio: CommandStdio
  /**
   * Call `fn` if the caller goes away before the command ends (SIGINT or
   * SIGTERM to layerctl; the run socket's client hanging up). Returns the
   * unregistration. After `fn`, a layerctl process exits 130.
   */
  onCallerGone: (fn: () => Promise<void>) => () => void
  /** layerd itself runs this command (the run socket, src/cli/run-server.ts): the daemon must not be started. */
  inDaemon: boolean
}

export interface CommandStdio { stdout: Writable, stderr: Writable }

export interface Command {
  name: string
  /** One line for `layerctl help`. */
  summary: string
  /** `layerctl NAME …` synopsis. */
  usage: string
  options: OptionSpec
  /** Exit code when the command fails for its own reasons; default 1 (2 for usage errors). */
  failureExitCode?: number
  /** Exit code: 0 (or undefined) on success. Throw LayerdErrors for failures. */
  run: (ctx: CommandContext, args: CommandArgs) => Promise<number | undefined>
}
