/**
 * OnDemandSocket on a real unix socket: nothing is loaded until a client
 * connects, the loaded handler sees every byte the client sent before it
 * was loaded, a failed load closes the connection and the next one loads
 * again, and close() removes the socket. The gRPC service through it is
 * exercised by containerd itself (containerd-snapshotter.test.ts).
 */
import t from 'tap'
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { OnDemandSocket, type SocketHandler } from './on-demand-socket.js'

// A short directory: a unix socket path must fit in sun_path (108 bytes), which t.testdir()'s names do not.
const dir = mkdtempSync('/tmp/layerd-od-')
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

/** A handler that echoes each connection's bytes back, upper-cased. */
function echoHandler (): SocketHandler & { taken: number, closed: boolean } {
  const sockets = new Set<Socket>()
  const h = {
    taken: 0,
    closed: false,
    take: (s: Socket) => {
      h.taken++
      sockets.add(s)
      s.on('data', d => s.write(d.toString().toUpperCase()))
      s.on('close', () => sockets.delete(s))
      s.resume()
    },
    close: async () => { h.closed = true; for (const s of sockets) s.destroy() }
  }
  return h
}

/** Connect, send `text`, and resolve with the first `expect` bytes of the answer (or '' when the server closes first). */
async function exchange (path: string, text: string, expect: number): Promise<string> {
  const s = connect(path)
  s.write(text)
  return await new Promise((resolve, reject) => {
    let got = ''
    s.on('data', d => { got += d.toString(); if (got.length >= expect) { s.destroy(); resolve(got) } })
    s.on('close', () => { resolve(got) })
    s.on('error', err => { if (['ECONNRESET', 'EPIPE'].includes((err as NodeJS.ErrnoException).code ?? '')) resolve(got); else reject(err) })
  })
}

t.test('OnDemandSocket loads its handler on the first connection, which sees the bytes sent before the load', async t => {
  const path = join(dir, 'first.sock')
  const handler = echoHandler()
  let loads = 0
  let release!: () => void
  const loaded = new Promise<void>(resolve => { release = resolve })
  const socket = new OnDemandSocket(path, async () => { loads++; await loaded; return handler }, () => {})
  await socket.listen()
  t.equal(statSync(path).mode & 0o777, 0o600, 'the socket is 0600')
  t.equal(loads, 0, 'nothing loaded before a client connects')
  t.notOk(socket.loaded)
  // Two clients write while the handler is still loading.
  const first = exchange(path, 'hello', 5)
  const second = exchange(path, 'again', 5)
  await new Promise(resolve => setTimeout(resolve, 200))
  t.equal(handler.taken, 0, 'no connection is served before the handler has loaded')
  release()
  t.same(await Promise.all([first, second]), ['HELLO', 'AGAIN'], 'both clients\' early bytes reached the handler')
  t.equal(loads, 1, 'loaded once for both')
  t.equal(await exchange(path, 'third', 5), 'THIRD', 'later connections go straight to the loaded handler')
  t.equal(loads, 1)
  await socket.close()
  t.ok(handler.closed, 'close() closes the handler')
  t.notOk(existsSync(path), 'close() removes the socket file')
  await socket.close() // idempotent
})

t.test('OnDemandSocket closes the connections of a failed load, logs it once, and loads again on the next connection', async t => {
  const path = join(dir, 'failing.sock')
  const logged: string[] = []
  const handler = echoHandler()
  let loads = 0
  const socket = new OnDemandSocket(path, async () => {
    if (++loads === 1) throw new Error('protos missing')
    return handler
  }, line => logged.push(line))
  await socket.listen()
  t.teardown(() => socket.close())
  t.equal(await exchange(path, 'x', 1), '', 'the connection is closed without an answer')
  t.equal(logged.length, 1)
  t.match(logged[0], /failing\.sock: cannot load its server: protos missing/)
  t.equal(await exchange(path, 'ok', 2), 'OK', 'the next connection loaded the handler')
  t.equal(loads, 2)
})

t.test('SnapshotsGrpcServer.take serves gRPC on connections OnDemandSocket accepted paused, the first ones while it loaded', async t => {
  const grpc = await import('@grpc/grpc-js')
  const { containerdService } = await import('./containerd-protos.js')
  const { SnapshotsGrpcServer } = await import('./snapshots-grpc-server.js')
  const { NotFoundError } = await import('../errors.js')
  const path = join(dir, 'grpc.sock')
  const snapshotter = { stat: (key: string) => { throw new NotFoundError(`snapshot ${key} does not exist`) } }
  const socket = new OnDemandSocket(path, async () => {
    await new Promise(resolve => setTimeout(resolve, 200)) // clients connect and send while this loads
    return new SnapshotsGrpcServer(snapshotter as never, () => {})
  }, () => {})
  await socket.listen()
  t.teardown(() => socket.close())
  const { Client } = containerdService('snapshots')
  const clients = [0, 1, 2].map(() => new Client(`unix://${path}`, grpc.credentials.createInsecure()))
  t.teardown(() => { for (const c of clients) c.close() })
  const stat = async (c: InstanceType<typeof Client>, key: string): Promise<{ code?: number, details?: string }> => await new Promise(resolve => {
    (c as any).Stat({ key }, { deadline: Date.now() + 60_000 }, (err: { code: number, details: string } | null) => { resolve(err ?? {}) })
  })
  const answers = await Promise.all(clients.map(async (c, i) => await stat(c, `k${i}`)))
  t.same(answers.map(a => a.code), [grpc.status.NOT_FOUND, grpc.status.NOT_FOUND, grpc.status.NOT_FOUND], 'each client got its answer')
  t.match(answers[2]!.details, /snapshot k2 does not exist/)
  t.equal((await stat(clients[0]!, 'later')).code, grpc.status.NOT_FOUND, 'a later call on an open connection')
})
