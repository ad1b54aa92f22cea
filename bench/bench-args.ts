/**
 * A benchmark's command-line options, parsed strictly with node:util's
 * parseArgs: an unknown or mistyped flag, a flag without its value, a
 * positional argument or a number that is not one stops the run with the
 * usage (exit 2). A published figure must never come from a run whose flag
 * was silently ignored.
 *
 * Bench-only. May import: src/errors.ts, node built-ins.
 */
import { parseArgs } from 'node:util'
import { UsageError, describeError } from '../src/errors.js'

/** One option: its type, default (strings only) and a few words for the usage line. */
export interface BenchOption {
  type: 'string' | 'boolean'
  /** The value when the flag is absent; an option with neither a default nor the flag reads as undefined. */
  default?: string
  /** May be given more than once (read with list()). */
  multiple?: boolean
  /** The value's placeholder in the usage, e.g. 'N' or 'DIR'. */
  value?: string
}

export type BenchOptions = Record<string, BenchOption>

/** The parsed options, read through accessors that check types and name the flag when a value is wrong. */
export class BenchArgs {
  constructor (
    private readonly script: string,
    private readonly values: Record<string, string | boolean | Array<string | boolean> | undefined>,
    private readonly spec: BenchOptions,
    /** What a bad value does: throw (parseBenchArgs) or print the usage and exit 2 (benchArgs). */
    private readonly fail: (err: UsageError) => never = err => { throw err }
  ) {}

  #option (name: string): BenchOption {
    const o = this.spec[name]
    if (o === undefined) throw new Error(`${this.script}: no option --${name} is declared`)
    return o
  }

  /** The string value of `--name` (its default when absent), or undefined when it has neither. */
  optString (name: string): string | undefined {
    this.#option(name)
    const v = this.values[name]
    return typeof v === 'string' ? v : undefined
  }

  /** The string value of `--name`; throws UsageError when it has none and no default. */
  string (name: string): string {
    const v = this.optString(name)
    if (v === undefined) this.fail(new UsageError(`${this.script}: --${name} is required`))
    return v
  }

  /** `--name` as a number of at least `min` (an integer unless `integer` is false); throws UsageError naming the flag. */
  number (name: string, { min = 0, integer = true }: { min?: number, integer?: boolean } = {}): number {
    const text = this.string(name)
    const n = Number(text)
    if (text.trim() === '' || !Number.isFinite(n) || (integer && !Number.isSafeInteger(n)) || n < min) {
      this.fail(new UsageError(`${this.script}: --${name} must be ${integer ? 'an integer' : 'a number'} >= ${min}, got ${JSON.stringify(text)}`))
    }
    return n
  }

  /** `--name` as one of `allowed`; a usage error naming them otherwise. */
  choice<T extends string> (name: string, allowed: readonly T[]): T {
    const v = this.string(name)
    if (!(allowed as readonly string[]).includes(v)) this.fail(new UsageError(`${this.script}: --${name} must be ${allowed.join(' or ')}, got ${JSON.stringify(v)}`))
    return v as T
  }

  /** True when the boolean flag `--name` was given. */
  flag (name: string): boolean {
    this.#option(name)
    return this.values[name] === true
  }

  /** Every value of a `multiple` option, in order. */
  list (name: string): string[] {
    this.#option(name)
    const v = this.values[name]
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : typeof v === 'string' ? [v] : []
  }
}

/** `node dist/bench/X.js [--a N] [--b]` for `spec`. */
export function benchUsage (script: string, spec: BenchOptions): string {
  const parts = Object.entries(spec).map(([name, o]) => {
    const flag = o.type === 'boolean' ? `--${name}` : `--${name} ${o.value ?? 'VALUE'}`
    return `[${flag}]${o.multiple === true ? '…' : ''}`
  })
  return `usage: node dist/bench/${script}.js ${parts.join(' ')}`.trimEnd()
}

/**
 * Parse `argv` against `spec`. Sync. Throws UsageError naming the flag and
 * the problem (unknown option, missing value, positional argument).
 */
export function parseBenchArgs (script: string, spec: BenchOptions, argv: string[], fail?: (err: UsageError) => never): BenchArgs {
  const options: Record<string, { type: 'string' | 'boolean', multiple?: boolean, default?: string }> = {}
  for (const [name, o] of Object.entries(spec)) {
    options[name] = { type: o.type, ...(o.multiple === true ? { multiple: true } : {}), ...(o.default !== undefined && o.multiple !== true ? { default: o.default } : {}) }
  }
  try {
    const { values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false })
    return new BenchArgs(script, values, spec, fail)
  } catch (err) {
    throw new UsageError(`${script}: ${describeError(err)}`, { cause: err })
  }
}

/**
 * The options of this process's command line. On a usage error, here or
 * later when a value is read, prints it with the usage to stderr and exits 2
 * (nothing has been measured yet).
 */
export function benchArgs (script: string, spec: BenchOptions): BenchArgs {
  const fail = (err: UsageError): never => {
    process.stderr.write(`${err.message}\n${benchUsage(script, spec)}\n`)
    process.exit(2)
  }
  try {
    return parseBenchArgs(script, spec, process.argv.slice(2), fail)
  } catch (err) {
    if (err instanceof UsageError) fail(err)
    throw err
  }
}
