/**
 * Where a VM's serial console and its hypervisor's own output go. The guest
 * is untrusted and root inside can write to its console forever, so nothing
 * it prints may grow without bound on the host: the first CONSOLE_FILE_BYTES
 * go to a log file in the sandbox's state directory, and the last
 * CONSOLE_TAIL_BYTES stay in memory for error messages (even after the
 * hypervisor exits).
 *
 * May import: node built-ins.
 */
import { createWriteStream, type WriteStream } from 'node:fs'
import { rm } from 'node:fs/promises'
import { createServer, type Server } from 'node:net'
import type { Readable } from 'node:stream'

export const CONSOLE_FILE_BYTES = 1024 * 1024
export const CONSOLE_TAIL_BYTES = 16 * 1024

export class ConsoleSink {
  readonly #file: WriteStream
  #written = 0
  #tail = Buffer.alloc(0)
  #truncated = false
  #server: Server | undefined

  constructor (readonly path: string) {
    this.#file = createWriteStream(path, { flags: 'a' })
    this.#file.on('error', () => {}) // diagnostics only: a full disk must not take the VM down
  }

  /** Take bytes from `stream` (a hypervisor's stdout/stderr) until it ends. Sync. */
  attach (stream: Readable): void {
    stream.on('data', (c: Buffer) => this.write(c))
    stream.on('error', () => {})
  }

  /** Listen on the Unix socket `socket` for the hypervisor's console chardev (it connects as a client). Async. */
  async listen (socket: string): Promise<void> {
    await rm(socket, { force: true })
    const server = createServer(conn => this.attach(conn))
    this.#server = server
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(socket, () => { server.off('error', reject); resolve() })
    })
  }

  write (c: Buffer): void {
    const room = CONSOLE_FILE_BYTES - this.#written
    if (room > 0) {
      const part = c.length > room ? c.subarray(0, room) : c
      this.#file.write(part)
      this.#written += part.length
    } else if (!this.#truncated) {
      this.#truncated = true
      this.#file.write(`\n[layerd: console log capped at ${CONSOLE_FILE_BYTES} bytes]\n`)
    }
    const joined = Buffer.concat([this.#tail, c])
    this.#tail = joined.length > CONSOLE_TAIL_BYTES ? Buffer.from(joined.subarray(joined.length - CONSOLE_TAIL_BYTES)) : joined
  }

  /** The last `lines` lines, joined with ' | ' for one-line messages. */
  tail (lines = 12): string {
    return this.#tail.toString('latin1').trim().split('\n').slice(-lines).map(l => l.trim()).join(' | ')
  }

  /** Stop listening and flush the file. Async; idempotent. */
  async close (): Promise<void> {
    this.#server?.close()
    this.#server = undefined
    if (!this.#file.closed) await new Promise<void>(resolve => this.#file.end(resolve))
  }
}
