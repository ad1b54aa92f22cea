/**
 * layerd's log lines: `--log-format text|json` and `--log-level
 * debug|info|warn|error`. Text is `<ISO time> <msg>`; JSON is one object per
 * line, `{ "time", "level", "msg", ...fields }`. The daemon logs through a
 * plain `(line) => void`; lines that start with a known failure word are
 * warnings, the rest info, so every existing call site keeps working.
 *
 * May import: errors.
 */
import { UsageError } from '../errors.js'

export type LogLevel = 'debug' | 'info' | 'warn' | 'error'
export type LogFormat = 'text' | 'json'
const LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error']

/** A LogLine (src/log-line.ts), plus `at` for a line with structured fields (JSON format). */
export interface Logger {
  (line: string, level?: LogLevel): void
  at: (level: LogLevel, msg: string, fields?: Record<string, unknown>) => void
}

export function parseLogLevel (s: string): LogLevel {
  if ((LEVELS as readonly string[]).includes(s)) return s as LogLevel
  throw new UsageError(`invalid --log-level ${JSON.stringify(s)}: use debug, info, warn or error`)
}

export function parseLogFormat (s: string): LogFormat {
  if (s === 'text' || s === 'json') return s
  throw new UsageError(`invalid --log-format ${JSON.stringify(s)}: use text or json`)
}

/** A logger writing to `write` (default stderr). Sync; never throws. */
export function createLogger (format: LogFormat, min: LogLevel, write: (line: string) => void = line => { process.stderr.write(line) }): Logger {
  const floor = LEVELS.indexOf(min)
  const at = (level: LogLevel, msg: string, fields: Record<string, unknown> = {}): void => {
    if (LEVELS.indexOf(level) < floor) return
    const time = new Date().toISOString()
    write(format === 'json'
      ? JSON.stringify({ time, level, msg, ...fields }) + '\n'
      : `${time} ${level === 'info' ? '' : `${level.toUpperCase()} `}${msg}\n`)
  }
  const log = ((msg: string, level: LogLevel = 'info') => { at(level, msg) }) as Logger
  log.at = at
  return log
}
