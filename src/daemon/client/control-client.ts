/**
 * layerctl's side of the control socket, typed by the map of
 * control-protocol.ts: `call('mount', params)` takes that method's params
 * and resolves with its result. A daemon error comes back as a LayerdError
 * with the daemon's code and message; an answer that is not JSON fails every
 * call in flight with DaemonUnavailableError (the connection is closed).
 *
 * May import: src/errors.ts, this folder.
 */
import { connect, type Socket } from 'node:net'
import {
  BadRequestError, DaemonUnavailableError, errorFromWire
} from '../../errors.js'
import { MAX_REQUEST_BYTES, type ControlCallArgs, type ControlMethod, type ControlResponse, type ControlResults } from './control-protocol.js'

export const CONNECT_TIMEOUT_MS = 2000

export class ControlClient {
  readonly #socket: Socket
  readonly #pending = new Map<number, { resolve: (v: unknown) => void, reject: (e: Error) => void }>()
  #nextId = 1
  #buffered = ''

  private constructor (socket: Socket) {
    this.#socket = socket
    socket.setEncoding('utf8')
    socket.on('data', (d: string) => this.#onData(d))
    socket.on('close', () => this.#failAll(new DaemonUnavailableError('layerd closed the control connection')))
    socket.on('error', err => this.#failAll(new DaemonUnavailableError(`layerd control connection failed: ${err.message}`, { cause: err })))
  }

  /** Connect to the daemon at `path`. Throws DaemonUnavailableError when nothing answers. */
  static async connect (path: string, timeoutMs = CONNECT_TIMEOUT_MS): Promise<ControlClient> {
    const socket = connect(path)
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { socket.destroy(); reject(new DaemonUnavailableError(`layerd at ${path} did not answer within ${timeoutMs} ms`)) }, timeoutMs)
      socket.once('connect', () => { clearTimeout(timer); resolve() })
      socket.once('error', err => { clearTimeout(timer); reject(new DaemonUnavailableError(`layerd is not running (${path}: ${(err as NodeJS.ErrnoException).code ?? err.message})`, { cause: err })) })
    })
    return new ControlClient(socket)
  }

  /** Call a daemon method with its params (see ControlParams). Async; rethrows the daemon's error as a LayerdError. */
  async call<M extends ControlMethod>(method: M, ...args: ControlCallArgs<M>): Promise<ControlResults[M]> {
    const id = this.#nextId++
    const line = JSON.stringify({ id, method, params: args[0] ?? {} })
    if (Buffer.byteLength(line) > MAX_REQUEST_BYTES) throw new BadRequestError(`control request ${method} is ${Buffer.byteLength(line)} bytes, over the ${MAX_REQUEST_BYTES}-byte limit`)
    const result = new Promise<unknown>((resolve, reject) => this.#pending.set(id, { resolve, reject }))
    this.#socket.write(line + '\n')
    return await result as ControlResults[M]
  }

  close (): void { this.#socket.destroy() }

  #onData (data: string): void {
    this.#buffered += data
    let nl: number
    while ((nl = this.#buffered.indexOf('\n')) !== -1) {
      const line = this.#buffered.slice(0, nl)
      this.#buffered = this.#buffered.slice(nl + 1)
      let res: ControlResponse
      try { res = JSON.parse(line) as ControlResponse } catch (err) {
        this.#failAll(new DaemonUnavailableError(`layerd sent an answer that is not JSON: ${(err as Error).message}`, { cause: err }))
        this.#socket.destroy()
        return
      }
      if (res.id === null) continue
      const p = this.#pending.get(res.id)
      if (p === undefined) continue
      this.#pending.delete(res.id)
      if ('error' in res) {
        p.reject(errorFromWire(res.error.code, res.error.message))
      } else p.resolve(res.result)
    }
  }

  #failAll (err: Error): void {
    for (const p of this.#pending.values()) p.reject(err)
    this.#pending.clear()
  }
}
