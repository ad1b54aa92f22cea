/**
 * How code below the entry points logs: a plain function taking one line and
 * its level. The level is said by the caller, never guessed from the words of
 * the message; a call without one is `info`. The daemon's Logger
 * (src/metrics/logger.ts) filters and formats by it; tests may pass any
 * `(line) => void`.
 *
 * May import: nothing.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error'

export type LogLine = (line: string, level?: LogLevel) => void
