/**
 * The commands running in one sandbox, as envd's process service sees them:
 * each has a pid of this table's own (the tiers run every command in a pid
 * namespace of its own, so no host or sandbox pid names it), its config and
 * tag, and listeners for its output and end. A command is one `exec` of the
 * tier (process: a bubblewrap over the sandbox's overlay; container: a
 * container over it), so commands share the sandbox's files and limits, and
 * start in milliseconds; killing one aborts that exec.
 *
 * May import: src/runtime/ (types), node built-ins.
 */
import { Writable } from 'node:stream'
import type { ExecOptions, ExecResult } from '../runtime/sandbox.js'

export interface ProcessConfig { cmd: string, args: string[], envs: Record<string, string>, cwd?: string }

export type ProcessEvent =
  | { kind: 'data', stream: 'stdout' | 'stderr', bytes: Buffer }
  | { kind: 'end', exitCode: number, status: string, error?: string }

export interface RunningProcess {
  readonly pid: number
  readonly config: ProcessConfig
  readonly tag?: string
  /** Subscribe to output and the end; returns the unsubscribe. A process already ended calls back with its end at once. */
  listen: (fn: (e: ProcessEvent) => void) => () => void
  kill: () => void
  readonly done: Promise<void>
}

/** Commands alive in one sandbox at once; more are refused (the node's 429). */
export const MAX_PROCESSES_PER_SANDBOX = 256
const FIRST_PID = 1000

type Exec = (opts: ExecOptions) => Promise<ExecResult>

export class SandboxProcesses {
  readonly #live = new Map<number, RunningProcess>()
  #nextPid = FIRST_PID

  constructor (private readonly exec: Exec) {}

  get size (): number { return this.#live.size }

  list (): RunningProcess[] { return [...this.#live.values()] }

  /** By pid, or by tag. */
  find (selector: { pid?: number, tag?: string }): RunningProcess | undefined {
    if (selector.pid !== undefined) return this.#live.get(selector.pid)
    return [...this.#live.values()].find(p => p.tag !== undefined && p.tag === selector.tag)
  }

  /** Start a command (sync: the exec runs on); `user` overrides the image's. */
  start (config: ProcessConfig, opts: { tag?: string, user?: string, stdin?: Uint8Array }): RunningProcess {
    const pid = this.#nextPid++
    const listeners = new Set<(e: ProcessEvent) => void>()
    let ended: ProcessEvent | undefined
    const emit = (e: ProcessEvent): void => { for (const l of listeners) l(e) }
    const sink = (stream: 'stdout' | 'stderr'): Writable => new Writable({
      write (chunk: Buffer, _enc, cb) { emit({ kind: 'data', stream, bytes: chunk }); cb() }
    })
    const abort = new AbortController()
    const envs = Object.entries(config.envs).map(([k, v]) => `${k}=${v}`)
    const done = this.exec({
      cmd: [config.cmd, ...config.args],
      env: envs,
      ...(config.cwd === undefined ? {} : { cwd: config.cwd }),
      ...(opts.user === undefined ? {} : { user: opts.user }),
      ...(opts.stdin === undefined ? {} : { stdin: opts.stdin }),
      stdout: sink('stdout'),
      stderr: sink('stderr'),
      abort: abort.signal
    }).then(r => {
      ended = { kind: 'end', exitCode: r.exitCode, status: r.signal === undefined ? `exit status ${r.exitCode}` : `signal: ${r.signal}` }
    }, (err: unknown) => {
      ended = { kind: 'end', exitCode: -1, status: 'error', error: (err as Error).message }
    }).then(() => {
      this.#live.delete(pid)
      emit(ended!)
      listeners.clear()
    })
    const proc: RunningProcess = {
      pid,
      config,
      ...(opts.tag === undefined ? {} : { tag: opts.tag }),
      listen: fn => {
        if (ended !== undefined) { fn(ended); return () => {} }
        listeners.add(fn)
        return () => listeners.delete(fn)
      },
      kill: () => { abort.abort() },
      done
    }
    this.#live.set(pid, proc)
    return proc
  }

  /** Kill every command and wait for them. Async. */
  async killAll (): Promise<void> {
    const all = [...this.#live.values()]
    for (const p of all) p.kill()
    await Promise.all(all.map(async p => await p.done))
  }
}
