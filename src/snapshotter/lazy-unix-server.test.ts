/**
 * LazyUnixServer with a real unix-socket backend (an echo server that tags
 * its replies): nothing is loaded before the first connection; connections
 * accepted while loading are piped to the backend; later ones reach it
 * directly; a failed load closes its connections and the next one retries;
 * close removes the socket.
 */
import t from 'tap'
import { chmodSync, existsSync, renameSync, rmSync, statSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { connect, createServer, type Server } from 'node:net'
import { join } from 'node:path'
import { LazyUnixServer, type UnixBackend } from './lazy-unix-server.js'

const work = await mkdtemp('/tmp/layerd-lazy-')
t.teardown(async () => await rm(work, { recursive: true, force: true }))

/** An echo backend: each connection's replies are prefixed with `tag` and how many connections it has accepted. */
class EchoBackend implements UnixBackend {
  accepted = 0
  #server: Server | undefined
  #path: string | undefined
  constructor (readonly tag: string) {}
  async listen (path: string, bindPath: string): Promise<void> {
    this.#server = createServer(s => { const n = ++this.accepted; s.on('data', d => s.write(`${this.tag}${n}:${d.toString()}`)) })
    await new Promise<void>(resolve => this.#server!.listen(bindPath, resolve))
    chmodSync(bindPath, 0o600)
    renameSync(bindPath, path)
    this.#path = path
  }

  async close (): Promise<void> {
    await new Promise(resolve => this.#server?.close(resolve))
    if (this.#path !== undefined) rmSync(this.#path, { force: true })
  }
}

/** Send `text` on a new connection to `path`; the first reply. */
async function ask (path: string, text: string): Promise<string> {
  return await new Promise((resolve, reject) => {
    const s = connect(path, () => s.write(text))
    s.once('data', d => { resolve(d.toString()); s.destroy() })
    s.once('error', reject)
    s.once('close', () => reject(new Error('closed without a reply')))
  })
}

t.test('`LazyUnixServer` loads its backend on the first connection, pipes the early ones, then steps aside', async t => {
  const path = join(work, 'a.sock')
  let loads = 0
  const backend = new EchoBackend('E')
  let release!: () => void
  const gate = new Promise<void>(resolve => { release = resolve })
  const server = new LazyUnixServer(path, async () => { loads++; await gate; return backend }, () => {})
  await server.listen()
  t.equal(statSync(path).mode & 0o777, 0o600, 'the socket is 0600 from the start')
  t.equal(loads, 0, 'nothing loaded before a connection')
  const early = [ask(path, 'x'), ask(path, 'y')]
  // Both connections are accepted while the load waits on the gate.
  while (loads === 0) await new Promise(resolve => setTimeout(resolve, 10))
  t.notOk(server.loaded, 'not loaded while its load runs')
  release()
  const replies = await Promise.all(early)
  t.match(replies[0], /^E\d:x$/, 'an early connection is answered by the backend')
  t.match(replies[1], /^E\d:y$/, 'so is the other')
  t.ok(server.loaded, 'loaded')
  t.equal(loads, 1, 'loaded once for both')
  t.equal(await ask(path, 'z'), 'E3:z', 'a later connection reaches the backend')
  t.equal(statSync(path).mode & 0o777, 0o600, 'the backend socket is 0600')
  await server.close()
  t.notOk(existsSync(path), 'close removes the socket')
  t.equal(await ask(path, 'w').catch((err: NodeJS.ErrnoException) => err.code), 'ENOENT', 'nothing answers after close')
})

t.test('`LazyUnixServer` closes the connections of a failed load, and the next connection loads again', async t => {
  const path = join(work, 'b.sock')
  const lines: string[] = []
  let fail = true
  const server = new LazyUnixServer(path, async () => {
    if (fail) throw new Error('no protos here')
    return new EchoBackend('F')
  }, line => lines.push(line))
  t.teardown(async () => await server.close())
  await server.listen()
  await t.rejects(ask(path, 'x'), 'the connection is closed unanswered (closed, EPIPE or ECONNRESET: whichever the client meets first)')
  t.match(lines.join('\n'), /cannot start its server: no protos here/, 'the failure is logged, naming the socket')
  t.notOk(server.loaded)
  fail = false
  t.equal(await ask(path, 'y'), 'F1:y', 'the next connection loads and is served')
})

t.test('`LazyUnixServer` closed before any connection removes its socket and loads nothing', async t => {
  const path = join(work, 'c.sock')
  let loads = 0
  const server = new LazyUnixServer(path, async () => { loads++; return new EchoBackend('G') }, () => {})
  await server.listen()
  await server.close()
  t.notOk(existsSync(path), 'the socket is gone')
  t.equal(loads, 0)
})
