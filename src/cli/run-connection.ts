/**
 * One connection of the run socket, served in layerd's runner process
 * (layerd/runner.ts; run-server.ts hands it the socket): read the request,
 * run it with the Node CLI's own main() (or answer fallback), stream its
 * output and send the exit frame (run-protocol.ts).
 *
 * Served: `run`, and `containerd pull` of a layerd image
 * (run-socket-commands.ts), for this node's home, asked with an absolute
 * home. Anything else gets the fallback frame and the client execs the Node
 * CLI, which answers it as before (another home, a relative --home, another
 * command, a request that does not parse). A client that hangs up ends its run: its
 * sandbox is destroyed. Nothing a client sends throws here: main() never
 * throws, and a bad request gets the fallback frame.
 *
 * May import: this folder.
 */
import { isAbsolute } from 'node:path'
import type { Socket } from 'node:net'
import { Writable } from 'node:stream'
import { commandSettings, main } from './main.js'
import { RUN_SOCKET_ENV, servedByRunSocket } from './run-socket-commands.js'
import { decodeRunRequest, encodeFrame, exitFrame, FRAME, MAX_RUN_REQUEST_BYTES, type RunRequest } from './run-protocol.js'
import type { LogLine } from '../log-line.js'

/** A client that has not sent its whole request within this is answered fallback. */
const REQUEST_TIMEOUT_MS = 10_000
const ENV_PREFIX = 'LAYERD_'

/** One connection: read the request, run it (or answer fallback), send the exit frame. `done` never rejects. */
export class RunConnection {
  readonly done: Promise<void>
  readonly #socket: Socket
  readonly #goneHandlers = new Set<() => Promise<void>>()
  #gone = false
  #finished = false

  constructor (socket: Socket, home: string, log: LogLine) {
    this.#socket = socket
    socket.on('error', () => socket.destroy())
    socket.on('close', () => { if (!this.#finished) this.callerGone() })
    this.done = this.#serve(home, log).catch(err => {
      log(`run socket: ${(err as Error)?.stack ?? String(err)}`, 'warn')
      socket.destroy()
    })
  }

  /** The client is gone (or the daemon stops): end the run; its sandbox is destroyed. Idempotent. */
  callerGone (): void {
    if (this.#gone) return
    this.#gone = true
    this.#socket.destroy()
    for (const fn of this.#goneHandlers) void fn().catch(() => {})
  }

  async #serve (home: string, log: LogLine): Promise<void> {
    const request = await this.#readRequest()
    if (request === undefined) return
    if (typeof request === 'string') { log(`run socket: ${request}; answered fallback`); this.#fallback(); return }
    const env = Object.fromEntries(Object.entries(request.env).filter(([k]) => k.startsWith(ENV_PREFIX) || (RUN_SOCKET_ENV as readonly string[]).includes(k)))
    const target = commandSettings(request.argv, env)
    // Served only when the Node CLI, run by this caller, would reach this very daemon for what this socket serves.
    if (target === undefined || !servedByRunSocket(target.command, target.args, env) || target.settings.home !== home ||
      (target.homeGiven !== undefined && !isAbsolute(target.homeGiven))) { this.#fallback(); return }
    const stdout = this.#stream(FRAME.STDOUT)
    const stderr = this.#stream(FRAME.STDERR)
    const code = await main(request.argv, {
      stdout: line => stdout.write(line + '\n'),
      stderr: line => stderr.write(line + '\n'),
      stderrIsTTY: false,
      env,
      stdio: { stdout, stderr },
      inDaemon: true,
      onCallerGone: fn => {
        this.#goneHandlers.add(fn)
        if (this.#gone) void fn().catch(() => {})
        return () => { this.#goneHandlers.delete(fn) }
      }
    })
    // Every output frame before the exit frame: the streams pass chunks to the socket one at a time.
    await Promise.all([stdout, stderr].map(async s => await new Promise<void>(resolve => s.end(() => resolve()))))
    this.#finished = true
    if (this.#gone) return
    await new Promise<void>(resolve => this.#socket.end(exitFrame(code), () => resolve()))
  }

  #fallback (): void {
    this.#finished = true
    this.#socket.end(encodeFrame(FRAME.FALLBACK, Buffer.alloc(0)))
  }

  /** A writable whose chunks go to the client as `type` frames, with the socket's backpressure; dropped once the client is gone. */
  #stream (type: number): Writable {
    return new Writable({
      write: (chunk: Buffer, _enc, cb) => {
        if (this.#gone || this.#socket.destroyed) { cb(); return }
        this.#socket.write(encodeFrame(type, chunk), () => cb())
      }
    })
  }

  /** The request, a string saying what is wrong with it, or undefined when the client left first. */
  async #readRequest (): Promise<RunRequest | string | undefined> {
    const socket = this.#socket
    return await new Promise(resolve => {
      let buf = Buffer.alloc(0)
      const timer = setTimeout(() => finish('the request did not arrive within 10 s'), REQUEST_TIMEOUT_MS)
      const finish = (r: RunRequest | string | undefined): void => {
        clearTimeout(timer)
        socket.off('data', onData).off('close', onClose)
        resolve(r)
      }
      const onClose = (): void => finish(undefined)
      const onData = (chunk: Buffer): void => {
        buf = Buffer.concat([buf, chunk])
        if (buf.length < 4) return
        const len = buf.readUInt32LE(0)
        if (len > MAX_RUN_REQUEST_BYTES) { finish(`a request of ${len} bytes is over the ${MAX_RUN_REQUEST_BYTES}-byte limit`); return }
        if (buf.length < 4 + len) return
        socket.pause()
        finish(decodeRunRequest(buf.subarray(4, 4 + len)))
      }
      socket.on('data', onData).on('close', onClose)
    })
  }
}
