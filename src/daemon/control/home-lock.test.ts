/**
 * Exactly one layerd per home, whatever the races: real daemon processes
 * started at once on one home (directly, and through layerctl's start on
 * demand), the home's flock deciding.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { layerdNode } from '../../../fixtures/layerd-harness.js'
import { pidFilePath, readDaemonPid, socketPath } from '../client/control-protocol.js'
import { DAEMON_ENTRY } from '../client/daemon-launcher.js'
import { AlreadyRunningError, HomeLock } from './home-lock.js'
import { LAYERD_EXIT } from '../../exit-codes.js'

const CONCURRENT_STARTS = 8
const dir = t.testdir()

interface Exited { pid: number, code: number | null, stderr: string }

/** Start `layerd --foreground` for `home`; resolves when it exits. */
function startForeground (home: string): { pid: number, exited: Promise<Exited> } {
  const child = spawn(process.execPath, [DAEMON_ENTRY, '--foreground', '--home', home], { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  return { pid: child.pid!, exited: new Promise(resolve => child.on('exit', code => resolve({ pid: child.pid!, code, stderr }))) }
}

t.test(`HomeLock: ${CONCURRENT_STARTS} layerd started at once for one home end with exactly one daemon; the others exit ALREADY_RUNNING`, async t => {
  const node = layerdNode(join(dir, 'direct'))
  t.teardown(() => node.stopDaemon())
  const starts = Array.from({ length: CONCURRENT_STARTS }, () => startForeground(node.home))
  // The losers exit on their own; the winner serves until stopped.
  const losers: Exited[] = []
  for (const s of starts) void s.exited.then(e => losers.push(e))
  // Generous: eight Node processes loading layerd at once on a shared 2-core machine take a while.
  await waitFor(() => losers.length >= CONCURRENT_STARTS - 1, 120_000, () => `${losers.length} of ${CONCURRENT_STARTS} starts exited: ${losers.map(l => l.code).join(', ')}`)
  await new Promise(resolve => setTimeout(resolve, 500)) // a second winner would show up as one more live process
  t.equal(losers.length, CONCURRENT_STARTS - 1, `${losers.length} of ${CONCURRENT_STARTS} exited`)
  for (const l of losers) {
    t.equal(l.code, LAYERD_EXIT.ALREADY_RUNNING, `pid ${l.pid} exited ALREADY_RUNNING`)
    t.match(l.stderr, /layerd is already running for .*direct/)
  }
  const winner = starts.find(s => !losers.some(l => l.pid === s.pid))!
  await waitFor(() => readDaemonPid(node.home) === winner.pid)
  const ping = JSON.parse((await node.layerctl('mounts', '--json')).stdout)
  t.same(ping, [], 'the one daemon serves')
  t.equal(readDaemonPid(node.home), winner.pid, 'the pid file names the daemon that holds the lock')

  const socketBefore = statSync(socketPath(node.home)).ino
  const pidBefore = statSync(pidFilePath(node.home)).ino
  const late = await startForeground(node.home).exited
  t.equal(late.code, LAYERD_EXIT.ALREADY_RUNNING, 'a start while it runs is refused')
  t.match(late.stderr, new RegExp(`already running for .* \\(pid ${winner.pid}\\)`), 'naming the running pid')
  t.equal(statSync(socketPath(node.home)).ino, socketBefore, 'and leaves its socket alone')
  t.equal(statSync(pidFilePath(node.home)).ino, pidBefore, 'and its pid file')
})

t.test(`connectDaemon: ${CONCURRENT_STARTS} layerctl commands at once on a home without a daemon start exactly one`, async t => {
  const node = layerdNode(join(dir, 'ondemand'))
  t.teardown(() => node.stopDaemon())
  const results = await Promise.all(Array.from({ length: CONCURRENT_STARTS }, async () => await node.layerctl('mounts', '--json')))
  for (const r of results) t.equal(r.code, 0, r.stderr)
  const pid = readDaemonPid(node.home)!
  t.ok(pid > 0)
  const log = readFileSync(join(node.home, 'layerd.log'), 'utf8')
  const serving = log.match(/layerd \d+ serving/g) ?? []
  t.equal(serving.length, 1, `one daemon served: ${serving.join(', ')}`)
  // The daemon is still the one recorded, after every client has come and gone.
  t.same(JSON.parse((await node.layerctl('mounts', '--json')).stdout), [])
  t.equal(readDaemonPid(node.home), pid)
})

t.test('HomeLock.acquire() waits for a holder that lets go, and names the holder when it does not', async t => {
  const home = t.testdir()
  const first = await HomeLock.acquire(home)
  first.writePidFile()
  await t.rejects(HomeLock.acquire(home), new AlreadyRunningError(`layerd is already running for ${home} (pid ${process.pid})`))
  setTimeout(() => first.release(), 100)
  const second = await HomeLock.acquire(home, 5_000)
  t.ok(second.held, 'taken once the first let go')
  t.equal(readDaemonPid(home), undefined, 'the first removed the pid file naming it')
  second.release()
  second.release()
  t.notOk(second.held, 'release() is idempotent')
})

async function waitFor (cond: () => boolean, timeoutMs = 10_000, what = (): string => ''): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms ${what()}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}
