/**
 * envd's `process.Process` service over Connect (./connect-framing.ts), its
 * messages as the `e2b` package's descriptors define them (process/process.proto):
 * - `Start` (server stream): `{ process: { cmd, args, envs, cwd }, tag, stdin, pty }`
 *   → `{ event: { start: { pid } } }`, then `{ event: { data: { stdout | stderr: base64 } } }`,
 *   then `{ event: { end: { exitCode, exited, status } } }`; keepalives at the client's
 *   `Keepalive-Ping-Interval`. The command outlives the stream (a background command's client
 *   disconnects); at `Connect-Timeout-Ms` it is killed and the stream ends with deadline_exceeded;
 * - `Connect` (server stream): the same events of a running command, from now on;
 * - `List`, `SendSignal` (SIGTERM and SIGKILL both end the command: the tiers kill the whole tree).
 * Not served (unimplemented): a PTY, stdin (`SendInput`, `StreamInput`, `CloseStdin`; a command's
 * stdin is empty), `Update`.
 *
 * May import: src/errors.ts, ./ modules, node built-ins.
 */
import { BadInputError, NotFoundError, UnsupportedError } from '../errors.js'
import type { ConnectStream } from './connect-framing.js'
import type { ProcessConfig, ProcessEvent, RunningProcess, SandboxProcesses } from './sandbox-processes.js'
import { MAX_PROCESSES_PER_SANDBOX } from './sandbox-processes.js'
import { LimitExceededError } from '../errors.js'

export interface CallContext {
  processes: SandboxProcesses
  /** The user from the SDK's `Authorization: Basic user:`, when it sent one. */
  user?: string
  keepaliveMs: number
  deadlineMs?: number
}

const obj = (v: unknown, what: string): Record<string, unknown> => {
  if (v === undefined || v === null) return {}
  if (typeof v !== 'object' || Array.isArray(v)) throw new BadInputError(`${what} must be an object`)
  return v as Record<string, unknown>
}

function processConfig (v: unknown): ProcessConfig {
  const p = obj(v, 'process')
  if (typeof p.cmd !== 'string' || p.cmd === '') throw new BadInputError('process.cmd must be a non-empty string')
  const args = p.args ?? []
  if (!Array.isArray(args) || !args.every(a => typeof a === 'string')) throw new BadInputError('process.args must be a list of strings')
  const envs: Record<string, string> = {}
  for (const [k, val] of Object.entries(obj(p.envs, 'process.envs'))) {
    if (typeof val !== 'string' || k === '' || k.includes('=')) throw new BadInputError(`process.envs.${k} must be a string under a name without '='`)
    envs[k] = val
  }
  if (p.cwd !== undefined && (typeof p.cwd !== 'string' || !p.cwd.startsWith('/'))) throw new BadInputError('process.cwd must be an absolute path')
  return { cmd: p.cmd, args: args as string[], envs, ...(typeof p.cwd === 'string' ? { cwd: p.cwd } : {}) }
}

function selected (processes: SandboxProcesses, v: unknown): RunningProcess {
  const sel = obj(v, 'process')
  const pid = sel.pid
  const tag = sel.tag
  if (pid !== undefined && (typeof pid !== 'number' || !Number.isInteger(pid))) throw new BadInputError('process.pid must be a whole number')
  if (tag !== undefined && typeof tag !== 'string') throw new BadInputError('process.tag must be a string')
  if (pid === undefined && tag === undefined) throw new BadInputError('select a process by pid or tag')
  const p = processes.find({ ...(pid === undefined ? {} : { pid: pid as number }), ...(tag === undefined ? {} : { tag: tag as string }) })
  if (p === undefined) throw new NotFoundError(`process ${String(pid ?? tag)} not found`)
  return p
}

function wire (e: ProcessEvent): unknown {
  if (e.kind === 'data') return { event: { data: { [e.stream]: e.bytes.toString('base64') } } }
  return { event: { end: { exitCode: e.exitCode, exited: e.error === undefined, status: e.status, ...(e.error === undefined ? {} : { error: e.error }) } } }
}

/** Relay a process's events to `stream` until it ends, the client goes, or the deadline passes. Async. */
async function relay (p: RunningProcess, stream: ConnectStream, ctx: CallContext, onClientGone: (fn: () => void) => void): Promise<void> {
  stream.send({ event: { start: { pid: p.pid } } })
  await new Promise<void>(resolve => {
    const keepalive = setInterval(() => { stream.send({ event: { keepalive: {} } }) }, ctx.keepaliveMs)
    const deadline = ctx.deadlineMs === undefined
      ? undefined
      : setTimeout(() => {
        p.kill()
        finish({ code: 'deadline_exceeded', message: `the command ran past the call's ${ctx.deadlineMs} ms timeout and was killed` })
      }, ctx.deadlineMs)
    let stop = (): void => {}
    const finish = (failure?: { code: 'deadline_exceeded', message: string }): void => {
      clearInterval(keepalive)
      clearTimeout(deadline)
      stop()
      stream.end(failure)
      resolve()
    }
    stop = p.listen(e => {
      stream.send(wire(e))
      if (e.kind === 'end') finish()
    })
    onClientGone(() => finish())
  })
}

export const processMethods = {
  async Start (msg: Record<string, unknown>, ctx: CallContext, stream: ConnectStream, onClientGone: (fn: () => void) => void): Promise<void> {
    if (msg.pty !== undefined && msg.pty !== null) throw new UnsupportedError('a PTY is not supported by layerd\'s API')
    if (msg.stdin === true) throw new UnsupportedError('stdin is not supported by layerd\'s API: a command\'s stdin is empty')
    if (msg.tag !== undefined && typeof msg.tag !== 'string') throw new BadInputError('tag must be a string')
    const config = processConfig(msg.process)
    if (ctx.processes.size >= MAX_PROCESSES_PER_SANDBOX) throw new LimitExceededError(`this sandbox runs its limit of ${MAX_PROCESSES_PER_SANDBOX} commands`)
    const p = ctx.processes.start(config, { ...(typeof msg.tag === 'string' ? { tag: msg.tag } : {}), ...(ctx.user === undefined ? {} : { user: ctx.user }) })
    await relay(p, stream, ctx, onClientGone)
  },

  async Connect (msg: Record<string, unknown>, ctx: CallContext, stream: ConnectStream, onClientGone: (fn: () => void) => void): Promise<void> {
    await relay(selected(ctx.processes, msg.process), stream, { ...ctx, deadlineMs: undefined }, onClientGone)
  },

  List (_msg: Record<string, unknown>, ctx: CallContext): unknown {
    return { processes: ctx.processes.list().map(p => ({ config: p.config, pid: p.pid, ...(p.tag === undefined ? {} : { tag: p.tag }) })) }
  },

  SendSignal (msg: Record<string, unknown>, ctx: CallContext): unknown {
    const p = selected(ctx.processes, msg.process)
    const signal = msg.signal
    if (!['SIGNAL_SIGKILL', 'SIGNAL_SIGTERM', 9, 15].includes(signal as string | number)) throw new BadInputError('signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM')
    p.kill()
    return {}
  }
}

export const STREAMING_PROCESS_METHODS = new Set(['Start', 'Connect'])
export const UNSERVED_PROCESS_METHODS = new Set(['SendInput', 'StreamInput', 'CloseStdin', 'Update'])
