/**
 * The host end of the guest agent's stream (agent-protocol.ts): waits for
 * READY, runs one exec at a time (later calls queue), feeds stdin, collects
 * stdout/stderr (capped: a guest printing forever cannot fill the host's
 * memory; the caller's streams still get everything), and turns a timeout
 * into a KILL frame (the agent kills the command's whole cgroup).
 *
 * The guest is untrusted: a malformed or oversized frame, or a second EXIT,
 * ends the channel with CorruptObjectError.
 *
 * May import: src/errors.ts, ../sandbox.ts, this folder, node built-ins.
 */
import type { Duplex } from 'node:stream'
import { constants } from 'node:os'
import { CorruptObjectError, UsageError, VmGoneError } from '../../errors.js'
import { CappedBuffer } from '../capped-buffer.js'
import type { ExecOptions, ExecResult } from '../sandbox.js'
import {
  FrameDecoder, Frame, STDIN_FRAME_BYTES, decodeAgentError, decodeExit, decodeReady, encodeExecRequest, encodeFrame,
  type DecodedFrame, type ExecRequest
} from './agent-protocol.js'

export const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 ** 2

export { VmGoneError }

const SIGNAL_NAMES = new Map(Object.entries(constants.signals).map(([name, n]) => [n, name]))

interface Running {
  out: CappedBuffer
  err: CappedBuffer
  opts: ExecOptions
  resolve: (r: ExecResult) => void
  reject: (e: Error) => void
  started: number
  timedOut: boolean
  timer?: NodeJS.Timeout
}

export class AgentChannel {
  /** The agent's READY facts (version, kernel, rootFreeBytes, uptimeS). Rejects if the stream ends first. */
  readonly ready: Promise<Record<string, string>>
  readonly #socket: Duplex
  readonly #decoder = new FrameDecoder()
  readonly #maxOutput: number
  #readyResolve!: (facts: Record<string, string>) => void
  #readyReject!: (e: Error) => void
  #isReady = false
  #running: Running | undefined
  #queue: Promise<unknown> = Promise.resolve()
  #closed: Error | undefined
  /** Explains a lost connection (e.g. the tail of the guest console); set by the owner. */
  describeLoss: () => string = () => ''

  constructor (socket: Duplex, opts: { maxOutputBytes?: number } = {}) {
    this.#socket = socket
    this.#maxOutput = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES
    this.ready = new Promise((resolve, reject) => { this.#readyResolve = resolve; this.#readyReject = reject })
    this.ready.catch(() => {}) // observed by whoever awaits it; never an unhandled rejection
    socket.on('data', (bytes: Buffer) => {
      try {
        for (const f of this.#decoder.push(bytes)) this.#onFrame(f)
      } catch (err) {
        this.#fail(err as Error)
        socket.destroy()
      }
    })
    socket.on('error', err => this.#fail(new VmGoneError(`VM agent connection failed: ${err.message}`, { cause: err })))
    socket.on('close', () => this.#fail(new VmGoneError(`VM agent connection closed${this.#lossDetail()}`)))
  }

  #lossDetail (): string {
    const d = this.describeLoss()
    return d === '' ? '' : `: ${d}`
  }

  #onFrame (f: DecodedFrame): void {
    if (!this.#isReady) {
      if (f.type !== Frame.READY) throw new CorruptObjectError(`VM agent sent frame type ${f.type} before READY`)
      this.#isReady = true
      this.#readyResolve(decodeReady(f.payload))
      return
    }
    const r = this.#running
    if (r === undefined) throw new CorruptObjectError(`VM agent sent frame type ${f.type} while no command runs`)
    switch (f.type) {
      case Frame.STDOUT: r.out.push(f.payload); r.opts.stdout?.write(Buffer.from(f.payload)); break
      case Frame.STDERR: r.err.push(f.payload); r.opts.stderr?.write(Buffer.from(f.payload)); break
      case Frame.EXIT: {
        const status = decodeExit(f.payload)
        this.#finish()
        const result: ExecResult = {
          exitCode: status.exitCode,
          timedOut: r.timedOut,
          stdout: r.out.value,
          stderr: r.err.value,
          durationMs: performance.now() - r.started
        }
        if (status.signal !== undefined) result.signal = SIGNAL_NAMES.get(status.signal) ?? `SIG${status.signal}`
        if (r.out.truncated || r.err.truncated) result.outputTruncated = true
        r.resolve(result)
        break
      }
      case Frame.ERROR: {
        const e = decodeAgentError(f.payload)
        this.#finish()
        r.reject(new UsageError(e.message))
        break
      }
      default: throw new CorruptObjectError(`VM agent sent unknown frame type ${f.type}`)
    }
  }

  #finish (): void {
    const r = this.#running
    if (r?.timer !== undefined) clearTimeout(r.timer)
    this.#running = undefined
  }

  #fail (err: Error): void {
    if (this.#closed !== undefined) return
    this.#closed = err
    if (!this.#isReady) this.#readyReject(err)
    const r = this.#running
    this.#finish()
    r?.reject(err)
  }

  /** True once the stream has ended or failed. */
  get closed (): boolean { return this.#closed !== undefined }

  /**
   * Run one command; resolves with its exit code and output once the agent
   * reports EXIT. Async; queued behind earlier calls. Rejects with UsageError
   * for an unknown user or an unusable working directory (reported by the
   * guest), VmGoneError when the VM goes away meanwhile.
   */
  async exec (req: Omit<ExecRequest, 'hostTimeMs'>, opts: ExecOptions): Promise<ExecResult> {
    const payload = encodeExecRequest({ ...req, hostTimeMs: Date.now() })
    const turn = this.#queue.then(async () => await this.#run(payload, opts))
    this.#queue = turn.catch(() => {})
    return await turn
  }

  async #run (payload: Buffer, opts: ExecOptions): Promise<ExecResult> {
    await this.ready
    if (this.#closed !== undefined) throw this.#closed
    return await new Promise<ExecResult>((resolve, reject) => {
      const r: Running = { out: new CappedBuffer(this.#maxOutput, true), err: new CappedBuffer(this.#maxOutput, true), opts, resolve, reject, started: performance.now(), timedOut: false }
      this.#running = r
      this.#socket.write(encodeFrame(Frame.EXEC, payload))
      const stdin = opts.stdin ?? new Uint8Array(0)
      for (let at = 0; at < stdin.length; at += STDIN_FRAME_BYTES) this.#socket.write(encodeFrame(Frame.STDIN, stdin.subarray(at, at + STDIN_FRAME_BYTES)))
      this.#socket.write(encodeFrame(Frame.STDIN_EOF))
      if (opts.timeoutMs !== undefined) {
        r.timer = setTimeout(() => {
          r.timedOut = true
          this.#socket.write(encodeFrame(Frame.KILL))
        }, opts.timeoutMs)
      }
    })
  }

  /** Kill whatever the current exec runs (its EXIT still arrives). Sync; no-op when idle. */
  killCurrent (): void {
    if (this.#running !== undefined && this.#closed === undefined) this.#socket.write(encodeFrame(Frame.KILL))
  }

  /**
   * The VM is being stopped or destroyed by its owner: the running exec (if
   * any) resolves as killed by SIGKILL (exit code 137), like a command whose
   * container is removed, and later calls reject with `reason`. Sync.
   */
  abandon (reason: Error): void {
    const r = this.#running
    if (r !== undefined) {
      this.#finish()
      const result: ExecResult = { exitCode: 128 + constants.signals.SIGKILL, signal: 'SIGKILL', timedOut: r.timedOut, stdout: r.out.value, stderr: r.err.value, durationMs: performance.now() - r.started }
      if (r.out.truncated || r.err.truncated) result.outputTruncated = true
      r.resolve(result)
    }
    this.#fail(reason)
  }

  /** Ask the agent to kill everything, sync the disk and power the guest off. Sync; no-op once closed. */
  shutdown (): void {
    if (this.#closed === undefined) this.#socket.write(encodeFrame(Frame.SHUTDOWN))
  }
}
