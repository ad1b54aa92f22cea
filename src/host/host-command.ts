/**
 * Running a short host program (mount steps, mkfs.ext4, debugfs, qemu-img,
 * runc state calls, decompressors, the C compiler) and collecting what it
 * printed: the one spawn-and-collect helper. Never for sandboxed commands
 * (src/runtime/process/exec-runner.ts).
 *
 * - collectHost() resolves with the exit status and output whatever the
 *   status: for callers that read a failure (mke2fs "no space", a
 *   decompressor that complains after writing the whole stream).
 * - runHost() / runHostBytes() reject with HostCommandError (a
 *   CommandFailedError) naming the command, its status and its stderr tail
 *   unless it exits 0.
 * - runHostScript() runs several steps in one `sh -c` with paths passed as
 *   positional parameters (never spliced into the script text), so a
 *   set-up costs one fork/exec round trip from Node instead of one per step.
 *
 * A missing program is UnsupportedError (`missing` says what to install).
 * A program running past `timeoutMs` is killed (SIGKILL) and fails.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { spawn } from 'node:child_process'
import { CommandFailedError, LimitExceededError, UnsupportedError } from '../errors.js'

const STDERR_TAIL_CHARS = 1500
const DEFAULT_TIMEOUT_MS = 60_000
const DEFAULT_MAX_STDOUT_BYTES = 64 * 1024 * 1024

export interface HostCommandOptions {
  cwd?: string
  /** The program's environment; default this process's. */
  env?: NodeJS.ProcessEnv
  /** Written to its stdin, which is then closed (default: empty). */
  input?: string | Uint8Array
  /** Killed and failed after this long; Infinity for no limit. Default 60,000. */
  timeoutMs?: number
  /** Killed and failed (LimitExceededError) when stdout exceeds this. Default 64 MiB. */
  maxStdoutBytes?: number
  /** Used in the error message instead of the command line. */
  what?: string
  /** The UnsupportedError message when the program is not installed. Default: "CMD is not installed; run .ci/setup". */
  missing?: string
}

export interface HostCommandResult {
  /** Exit code; null when killed by a signal. */
  code: number | null
  signal: NodeJS.Signals | null
  timedOut: boolean
  stdout: Buffer
  /** The last STDERR_TAIL_CHARS characters, trimmed. */
  stderr: string
}

/** A host program failed: `exitCode` and the tail of its `stderr` are kept. */
export class HostCommandError extends CommandFailedError {
  readonly exitCode: number | null
  readonly stderr: string
  constructor (message: string, exitCode: number | null, stderr: string, options?: { cause?: unknown }) {
    super(message, options)
    this.exitCode = exitCode
    this.stderr = stderr
  }
}

/**
 * Run `cmd args…` to its end and collect its output. Async. Resolves for
 * any exit status (a timeout too: `timedOut`); rejects with UnsupportedError
 * when the program is missing and LimitExceededError when its stdout
 * exceeds `maxStdoutBytes` (it is killed).
 */
export async function collectHost (cmd: string, args: readonly string[], opts: HostCommandOptions = {}): Promise<HostCommandResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS
  const maxStdout = opts.maxStdoutBytes ?? DEFAULT_MAX_STDOUT_BYTES
  return await new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    let outBytes = 0
    let err = ''
    let timedOut = false
    let overflow = false
    const timer = Number.isFinite(timeoutMs) ? setTimeout(() => { timedOut = true; child.kill('SIGKILL') }, timeoutMs) : undefined
    child.stdout.on('data', (c: Buffer) => {
      outBytes += c.length
      if (outBytes > maxStdout) { overflow = true; child.kill('SIGKILL') } else out.push(c)
    })
    child.stderr.on('data', (c: Buffer) => { err = (err + c.toString()).slice(-STDERR_TAIL_CHARS) })
    child.on('error', e => {
      clearTimeout(timer)
      reject((e as NodeJS.ErrnoException).code === 'ENOENT'
        ? new UnsupportedError(opts.missing ?? `${cmd} is not installed; run .ci/setup`, { cause: e })
        : new CommandFailedError(`cannot run ${describeCommand(cmd, args, opts)}: ${e.message}`, { cause: e }))
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      if (overflow) { reject(new LimitExceededError(`${describeCommand(cmd, args, opts)} printed more than ${maxStdout} bytes`)); return }
      resolve({ code, signal, timedOut, stdout: Buffer.concat(out), stderr: err.trim() })
    })
    child.stdin.on('error', () => {}) // the child may exit without reading its input
    child.stdin.end(opts.input ?? '')
  })
}

/**
 * Run `cmd args…` and resolve with its stdout bytes. Async. Rejects as
 * collectHost(), and with HostCommandError naming the command, its exit
 * status and stderr tail unless it exits 0 in time.
 */
export async function runHostBytes (cmd: string, args: readonly string[], opts: HostCommandOptions = {}): Promise<Buffer> {
  const r = await collectHost(cmd, args, opts)
  if (r.code === 0 && !r.timedOut) return r.stdout
  const status = r.timedOut ? `timed out after ${opts.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms` : r.signal !== null ? `killed by ${r.signal}` : `exit ${r.code}`
  throw new HostCommandError(`${describeCommand(cmd, args, opts)} failed (${status}): ${r.stderr.split('\n').slice(-4).join(' | ')}`, r.code, r.stderr)
}

/** runHostBytes() with stdout as UTF-8 text. Async. */
export async function runHost (cmd: string, args: readonly string[], opts: HostCommandOptions = {}): Promise<string> {
  return (await runHostBytes(cmd, args, opts)).toString()
}

/**
 * Run a POSIX shell script with `set -eu` and the given positional
 * parameters ($1, $2, …). Async; rejects like {@link runHost}, naming `what`.
 */
export async function runHostScript (what: string, script: string, params: readonly string[], opts: Omit<HostCommandOptions, 'what'> = {}): Promise<string> {
  return await runHost('sh', ['-euc', script, 'sh', ...params], { ...opts, what })
}

function describeCommand (cmd: string, args: readonly string[], opts: HostCommandOptions): string {
  return opts.what ?? `${cmd} ${args.join(' ')}`.slice(0, 400)
}
