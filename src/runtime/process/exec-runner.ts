/**
 * Run one sandboxed command's runtime process (bwrap, runc, crun) to
 * completion: feed stdin, collect stdout and stderr (capped, so a `yes`
 * cannot fill layerd's memory; the streams given by the caller still get
 * everything), pass extra pipes as fds 3, 4, …, and on timeout call the
 * tier's kill function, which must take the whole sandboxed process tree
 * down. The exit code comes back as the runtime reports it.
 *
 * The runtime process is started with posix_spawn (src/host/vfork-spawn.ts),
 * not child_process: a fork copies the caller's page tables, and the caller
 * may be a node agent of hundreds of MB.
 *
 * May import: src/errors.ts, src/host/, ../sandbox.ts, node built-ins.
 */
import { constants } from 'node:os'
import { UnsupportedError } from '../../errors.js'
import { spawnVfork, type VforkChild } from '../../host/vfork-spawn.js'
import { CappedBuffer } from '../capped-buffer.js'
import type { ExecOptions, ExecResult } from '../sandbox.js'

/** Default cap on collected stdout and on collected stderr, each. */
export const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 ** 2
const KILL_GRACE_MS = 5000

export interface RunSpec {
  argv: string[]
  /** Data for extra fds 3, 4, …: each a pipe, written and closed right after spawn. */
  extraFds?: Uint8Array[]
  /** Open fds of this process the command gets after the extra pipes (fds 3 + extraFds.length, …). */
  inheritFds?: number[]
  cwd?: string
  env?: NodeJS.ProcessEnv
  maxOutputBytes?: number
  /** Called with the runtime process's pid right after spawn. */
  onSpawn?: (pid: number) => void
  /** Kill the whole tree; called once on timeout. */
  kill: () => Promise<void>
}

/**
 * Spawn `spec.argv` and resolve when it exits and its output is drained.
 * Async. Rejects with UnsupportedError only when the program cannot be
 * started; a failing command resolves with its exit code.
 */
export async function runToCompletion (spec: RunSpec, opts: ExecOptions): Promise<ExecResult> {
  const started = performance.now()
  const extra = spec.extraFds ?? []
  let child: VforkChild
  try {
    child = spawnVfork(spec.argv, { ...(spec.cwd === undefined ? {} : { cwd: spec.cwd }), env: spec.env ?? {}, extraPipes: extra.length, ...(spec.inheritFds === undefined ? {} : { inheritFds: spec.inheritFds }) })
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new UnsupportedError(`${spec.argv[0]} is not installed; run .ci/setup`, { cause: e })
    throw e
  }
  spec.onSpawn?.(child.pid)
  const max = spec.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES
  const out = new CappedBuffer(max)
  const err = new CappedBuffer(max)
  child.stdout.on('data', (c: Buffer) => { out.push(c); opts.stdout?.write(c) })
  child.stderr.on('data', (c: Buffer) => { err.push(c); opts.stderr?.write(c) })
  extra.forEach((data, i) => {
    const s = child.extra[i]!
    s.on('error', () => {})
    s.end(data)
  })
  child.stdin.on('error', () => {}) // the command may exit without reading its input
  child.stdin.end(opts.stdin ?? new Uint8Array(0))

  let timedOut = false
  let timer: NodeJS.Timeout | undefined
  if (opts.timeoutMs !== undefined) {
    timer = setTimeout(() => {
      timedOut = true
      spec.kill().catch(() => {})
      // Belt and braces: if the tier's kill did not reach the runtime process itself.
      setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS).unref()
    }, opts.timeoutMs)
  }
  let aborted = false
  const onAbort = (): void => {
    aborted = true
    spec.kill().catch(() => {})
    setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS).unref()
  }
  if (opts.abort?.aborted === true) onAbort()
  else opts.abort?.addEventListener('abort', onAbort, { once: true })
  const [code, signal] = await child.closed
  opts.abort?.removeEventListener('abort', onAbort)
  if (timer !== undefined) clearTimeout(timer)
  const result: ExecResult = {
    exitCode: code ?? 128 + (signal === null ? 9 : osSignalNumber(signal)),
    timedOut,
    stdout: out.value,
    stderr: err.value,
    durationMs: performance.now() - started
  }
  if (signal !== null) result.signal = signal
  else if (timedOut || aborted) result.signal = 'SIGKILL'
  if (out.truncated || err.truncated) result.outputTruncated = true
  return result
}

function osSignalNumber (signal: NodeJS.Signals): number {
  return constants.signals[signal] ?? 9
}
