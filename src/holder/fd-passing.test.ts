/**
 * fd passing (native/fd_passing.c) and the holder's fd store protocol: a
 * file's fd sent over a SOCK_SEQPACKET socketpair arrives as a new fd of the
 * same open file; HolderFdStore's put/list/drop against a responder that
 * speaks fd-store-protocol.ts as the holder does; bad requests are refused.
 * A peer's close is seen on the event loop at once (fdWatchHangup,
 * HolderFdStore.onGone), not at the next call.
 */
import t from 'tap'
import { execFileSync } from 'node:child_process'
import { closeSync, openSync, readSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { nativeFdPassing } from '../native.js'
import { decodeRequest, validFdName } from './fd-store-protocol.js'
import { HolderFdStore } from './fd-stores.js'

const fdp = nativeFdPassing()
const dir = t.testdir()

t.test('an fd sent with SCM_RIGHTS reads the same open file', async t => {
  const file = join(dir, 'f')
  writeFileSync(file, 'held across processes')
  const fd = openSync(file, 'r')
  const [a, b] = fdp.fdSocketPair()
  fdp.fdSend(a, Buffer.from('hello'), [fd])
  const m = fdp.fdRecv(b, 1024, 1000)!
  t.equal(m.data.toString(), 'hello')
  t.equal(m.fds.length, 1)
  t.not(m.fds[0], fd, 'a new fd number')
  const buf = Buffer.alloc(64)
  t.equal(buf.subarray(0, readSync(m.fds[0]!, buf, 0, 64, 0)).toString(), 'held across processes')
  t.throws(() => fdp.fdRecv(b, 1024, 50), { code: 'ETIMEDOUT' }, 'nothing more: the wait is bounded')
  closeSync(a)
  t.equal(fdp.fdRecv(b, 1024, 1000), null, 'end of stream once the peer closes')
  for (const x of [fd, b, m.fds[0]!]) closeSync(x)
})

t.test('HolderFdStore: put, list, drop against a holder-side responder', async t => {
  const [daemonEnd, holderEnd] = fdp.fdSocketPair()
  // The holder's side, as holder.ts answers it, on its own thread (the store's calls block this one).
  const worker = new Worker(`
    const { workerData } = require('node:worker_threads')
    const { closeSync } = require('node:fs')
    import(workerData.native).then(({ nativeFdPassing }) => import(workerData.protocol).then(({ decodeRequest, encodeMessage }) => {
      const fdp = nativeFdPassing()
      const kept = new Map()
      const sock = workerData.sock
      for (;;) {
        const m = fdp.fdRecv(sock, 65536, -1)
        if (m === null) break
        const req = decodeRequest(m.data)
        const reply = (r, fds = []) => fdp.fdSend(sock, encodeMessage(r), fds)
        if (typeof req === 'string') reply({ op: 'error', message: req })
        else if (req.op === 'put') { kept.set(req.name, m.fds[0]); reply({ op: 'ok' }) }
        else if (req.op === 'drop') { closeSync(kept.get(req.name)); kept.delete(req.name); reply({ op: 'ok' }) }
        else if (req.op === 'list') { for (const [name, fd] of kept) reply({ op: 'fd', name }, [fd]); reply({ op: 'end', count: kept.size }) }
        else reply({ op: 'ok' })
      }
    }))`, { eval: true, workerData: { sock: holderEnd, native: new URL('../native.js', import.meta.url).href, protocol: new URL('./fd-store-protocol.js', import.meta.url).href } })
  const store = new HolderFdStore(daemonEnd)
  const file = join(dir, 'g')
  writeFileSync(file, 'x')
  const fd = openSync(file, 'r')
  store.put('fuse-abc', fd)
  const listed = store.list()
  t.same([...listed.keys()], ['fuse-abc'], 'list returns what was put')
  for (const x of listed.values()) closeSync(x)
  store.drop('fuse-abc')
  t.same([...store.list().keys()], [], 'dropped')
  t.throws(() => store.put('bad:name', fd), /refused put/, 'a bad name is refused by the holder side')
  closeSync(fd)
  closeSync(daemonEnd)
  await new Promise(resolve => worker.once('exit', resolve))
  closeSync(holderEnd)
})

/** What `p` settles to, or 'none' if it has not within `ms`. Async. */
async function within<T> (p: Promise<T>, ms: number): Promise<T | 'none'> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<'none'>(resolve => { timer = setTimeout(() => resolve('none'), ms) })
  try { return await Promise.race([p, late]) } finally { clearTimeout(timer) }
}

t.test('fdWatchHangup() calls back once the peer closes, not for a message it sends, which stays to be read', async t => {
  const [a, b] = fdp.fdSocketPair()
  let calls = 0
  const hung = new Promise<NodeJS.ErrnoException | null>(resolve => fdp.fdWatchHangup(a, err => { calls++; resolve(err) }))
  fdp.fdSend(b, Buffer.from('an answer'), [])
  t.equal(await within(hung, 200), 'none', 'a message is not a hang-up')
  t.equal(fdp.fdRecv(a, 1024, 0)?.data.toString(), 'an answer', 'and the watch did not read it')
  closeSync(b)
  t.equal(await within(hung, 5_000), null, 'the close is seen, without a call on the socket')
  await new Promise(resolve => setTimeout(resolve, 50))
  t.equal(calls, 1, 'once')
  closeSync(a)
})

t.test('fdWatchHangup() reports a peer that closed with our messages unread as ECONNRESET', async t => {
  const [a, b] = fdp.fdSocketPair()
  fdp.fdSend(a, Buffer.from('{"op":"ready"}'), []) // as layerd's ready, sent without waiting for the answer
  const hung = within(new Promise(resolve => fdp.fdWatchHangup(a, resolve)), 5_000)
  closeSync(b)
  t.match(await hung, { code: 'ECONNRESET', syscall: 'poll' })
  closeSync(a)
})

t.test('fdWatchHangup() refuses what is not a socket, and keeps no process alive', async t => {
  const fd = openSync(join(dir, 'g'), 'w')
  t.throws(() => fdp.fdWatchHangup(fd, () => {}), { code: 'ENOTSOCK', syscall: 'getsockopt' })
  closeSync(fd)
  t.throws(() => fdp.fdWatchHangup(-1, () => {}), TypeError)
  // A process whose only handle is a watch on a live socket ends by itself.
  const script = `import(${JSON.stringify(new URL('../native.js', import.meta.url).href)}).then(({ nativeFdPassing }) => {
    const fdp = nativeFdPassing(); const [a] = fdp.fdSocketPair(); fdp.fdWatchHangup(a, () => {}); globalThis.peer = a })`
  t.doesNotThrow(() => execFileSync(process.execPath, ['-e', script], { timeout: 10_000 }), 'node exits on its own')
})

t.test('HolderFdStore.onGone() hears at once that the holder died, with or without a request of ours unread', async t => {
  for (const unread of [false, true]) {
    const [daemonEnd, holderEnd] = fdp.fdSocketPair()
    const store = new HolderFdStore(daemonEnd)
    if (unread) store.ready() // sent, its answer not waited for
    const gone = within(new Promise(resolve => store.onGone(resolve)), 5_000)
    closeSync(holderEnd)
    t.match(await gone, { code: 'ERR_FD_STORE', message: unread ? /^the holder is gone \(its socket failed: ECONNRESET/ : /^the holder is gone \(its socket hung up\)$/ },
      unread ? 'a ready not yet read' : 'nothing in flight')
    closeSync(daemonEnd)
  }
})

t.test('the protocol refuses what it does not know', async t => {
  t.equal(decodeRequest(Buffer.from('[1]')), 'not an object')
  t.equal(decodeRequest(Buffer.from('{"op":"put","name":"a:b"}')), 'bad fd name "a:b"')
  t.match(decodeRequest(Buffer.from('{"op":"__proto__"}')), /unknown op/)
  t.equal(decodeRequest(Buffer.from('\xff')), 'not JSON')
  t.ok(validFdName('fuse-0123') && !validFdName('') && !validFdName('x'.repeat(65)))
})
