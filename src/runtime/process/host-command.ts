/**
 * Run a short host command (mount, umount, mkfs, runc state calls) and fail
 * with a message naming it and quoting its stderr. Used by the overlay and
 * both Linux tiers for set-up and teardown; never for sandboxed commands
 * (see `exec-runner.ts`).
 *
 * `runHostScript` runs several steps in one `sh -c` with paths passed as
 * positional parameters (never spliced into the script text), so a set-up
 * costs one fork/exec round trip from Node instead of one per step.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { spawn } from 'node:child_process'
import { UnsupportedError } from '../../errors.js'

const STDERR_TAIL_CHARS = 1500
const DEFAULT_TIMEOUT_MS = 60_000

export interface HostCommandOptions {
  cwd?: string
  input?: string | Uint8Array
  timeoutMs?: number
  /** Used in the error message instead of the command line. */
  what?: string
}

/** Thrown when a host command exits non-zero; `stderr` holds its tail. */
export class HostCommandError extends UnsupportedError {
  readonly exitCode: number | null
  readonly stderr: string
  constructor (message: string, exitCode: number | null, stderr: string, options?: { cause?: unknown }) {
    super(message, options)
    this.exitCode = exitCode
    this.stderr = stderr
  }
}

/**
 * Run `cmd args…` and resolve with its stdout. Async. Rejects with
 * UnsupportedError when the program is missing and HostCommandError (an
 * UnsupportedError) naming the command, its exit status and stderr tail
 * when it fails or runs past `timeoutMs` (then killed).
 */
export async function runHost (cmd: string, args: readonly string[], opts: HostCommandOptions = {}): Promise<string> {
  return await new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, stdio: ['pipe', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    let err = ''
    let timedOut = false
    const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL') }, opts.timeoutMs ?? DEFAULT_TIMEOUT_MS)
    child.stdout.on('data', (c: Buffer) => out.push(c))
    child.stderr.on('data', (c: Buffer) => { err = (err + c.toString()).slice(-STDERR_TAIL_CHARS) })
    child.on('error', e => {
      clearTimeout(timer)
      reject((e as NodeJS.ErrnoException).code === 'ENOENT'
        ? new UnsupportedError(`${cmd} is not installed; run .ci/setup`, { cause: e })
        : e)
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      if (code === 0) { resolve(Buffer.concat(out).toString()); return }
      const what = opts.what ?? `${cmd} ${args.join(' ')}`.slice(0, 400)
      const status = timedOut ? `timed out after ${opts.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms` : signal !== null ? `killed by ${signal}` : `exit ${code}`
      reject(new HostCommandError(`${what} failed (${status}): ${err.trim().split('\n').slice(-4).join(' | ')}`, code, err))
    })
    child.stdin.on('error', () => {}) // the child may exit without reading its input
    child.stdin.end(opts.input ?? '')
  })
}

/**
 * Run a POSIX shell script with `set -eu` and the given positional
 * parameters ($1, $2, …). Async; rejects like {@link runHost}, naming `what`.
 */
export async function runHostScript (what: string, script: string, params: readonly string[], opts: Omit<HostCommandOptions, 'what'> = {}): Promise<string> {
  return await runHost('sh', ['-euc', script, 'sh', ...params], { ...opts, what })
}
