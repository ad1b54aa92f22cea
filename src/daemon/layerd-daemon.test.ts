/**
 * LayerdDaemon's start order (issue 15, daemon start): the control socket
 * listens before the serving parts open and the services start; `ping` is
 * answered at once, every other request waits until the daemon serves, and a
 * start that fails answers the waiting requests with its error.
 */
import t, { type Test } from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ControlClient } from './client/control-client.js'
import { socketPath } from './client/control-protocol.js'
import { LayerdDaemon, type DaemonService } from './layerd-daemon.js'

/** A service whose start waits until `release()`; `started` resolves when the daemon has begun starting it. */
function blockedService (): { start: () => Promise<DaemonService>, started: Promise<void>, release: (err?: Error) => void } {
  let began!: () => void
  const started = new Promise<void>(resolve => { began = resolve })
  let release!: (err?: Error) => void
  const released = new Promise<void>((resolve, reject) => { release = err => { if (err === undefined) resolve(); else reject(err) } })
  return { start: async () => { began(); await released; return { close: async () => {} } }, started, release }
}

/** A home with a short path (a Unix socket path is at most 107 bytes: t.testdir()'s are longer). */
function shortHome (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'layerd-start-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return join(dir, 'home')
}

function daemonAt (home: string, service: () => Promise<DaemonService>): LayerdDaemon {
  return new LayerdDaemon({ home, cacheBytes: 64 * 1024 * 1024, restoreMounts: false, memoryTarget: null, log: () => {}, services: [service] })
}

t.test('LayerdDaemon.start() accepts connections before it serves, and answers their requests once it serves', async t => {
  const home = shortHome(t)
  const service = blockedService()
  const daemon = daemonAt(home, service.start)
  t.teardown(async () => { await daemon.stop() })
  const starting = daemon.start()
  await Promise.race([service.started, starting]) // the database and the cache are open, the service is still starting
  const client = await ControlClient.connect(socketPath(home)) // refused here before: the socket listened last
  t.teardown(() => client.close())
  t.pass('the socket accepts while a service is still starting')
  let answered = 0
  const ping = client.call('ping').then(r => { answered++; return r })
  const mounts = client.call('mounts').then(r => { answered++; return r })
  await new Promise(resolve => setTimeout(resolve, 100))
  t.equal(answered, 0, '`ping` and `mounts` wait while the daemon does not serve yet')
  service.release()
  await starting
  t.equal((await ping).pid, process.pid, '`ping` is answered once the daemon serves')
  t.same(await mounts, [], '`mounts` is answered once the daemon serves')
})

t.test('LayerdDaemon.start() that fails answers the requests that waited with its error', async t => {
  const home = shortHome(t)
  const service = blockedService()
  const daemon = daemonAt(home, service.start)
  t.teardown(async () => { await daemon.stop() })
  const starting = daemon.start()
  await Promise.race([service.started, starting])
  const client = await ControlClient.connect(socketPath(home))
  t.teardown(() => client.close())
  const mounts = client.call('mounts')
  mounts.catch(() => {}) // judged below, after start() has thrown
  await new Promise(resolve => setTimeout(resolve, 50)) // the request reaches the daemon before the start fails
  service.release(new Error('the service cannot bind its socket'))
  await t.rejects(starting, /cannot bind its socket/, 'start() throws the service\'s error')
  await t.rejects(mounts, /cannot bind its socket/, 'the waiting request is answered with it')
})
