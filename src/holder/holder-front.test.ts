/**
 * The holder's C front (native/holder_front.c), as layerctl starts it
 * (daemon-launcher.ts's holderCommand): layerd is started before the Node
 * holder boots, is the holder's child from the start, and the holder keeps
 * it as one it had started itself (restarted after a SIGKILL, stopped with
 * the holder). A second start for a home whose holder runs changes nothing.
 * layerd serves without waiting for a Node holder still booting; one that
 * dies leaves layerd serving, unprotected, and layerd says so at once.
 */
import t, { type Test } from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { getPriority } from 'node:os'
import { join } from 'node:path'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { callHolder } from './holder-client.js'
import { connectDaemon, HOLDER_ENTRY, HOLDER_FRONT, holderCommand } from '../daemon/client/daemon-launcher.js'
import { HOLDER_PID_FILE } from './fd-store-protocol.js'

// A crash is then always followed by a cold start, so the test sees the restart of the adopted layerd itself.
process.env.LAYERD_WARM_STANDBY = '0'
// Subtests' own test dirs have long names; layerd's socket path must stay under the 108-byte sun_path limit.
const dir = t.testdir()

/** The parent pid of `pid` (/proc/PID/stat, field 4; the comm field may hold spaces). Sync. */
function parentOf (pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
}

/** The nice value of a thread (/proc/PID/task/TID/stat, field 19). Sync. */
function niceOf (pid: number, tid = pid): number {
  const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])
}

/** Ping the daemon at `home` (starting none): its pid. Async. */
async function servingPid (home: string): Promise<number> {
  const client = await connectDaemon({ home, autoStart: false })
  try { return (await client.call('ping')).pid } finally { client.close() }
}

/** Wait until `check` holds (polling every 50 ms), or fail naming `what`. Async. */
async function until (what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  throw new Error(`timed out waiting until ${what}`)
}

/** The pid in `<home>/holder.pid`. Sync. */
function holderPid (home: string): number {
  return Number(readFileSync(join(home, HOLDER_PID_FILE), 'utf8').trim())
}

/** Start layerd at `<dir>/name` as layerctl does (through the front), stopped at the test's end: its pid and the holder's. Async. */
async function startedHome (t: Test, name: string): Promise<{ home: string, pid: number, holder: number }> {
  const home = join(dir, name)
  t.teardown(layerdNode(home).stopDaemon)
  const client = await connectDaemon({ home })
  try { return { home, pid: (await client.call('ping')).pid, holder: holderPid(home) } } finally { client.close() }
}

/** Start the front at `<dir>/name` with the holder entry `script` (JS source) instead of the Node holder, logging to layerd.log. Sync. */
function startWithHolder (t: Test, name: string, script: string, env: NodeJS.ProcessEnv = process.env): { home: string, front: ChildProcess } {
  const home = join(dir, name)
  t.teardown(layerdNode(home).stopDaemon)
  const entry = join(dir, `${name}-holder.mjs`)
  writeFileSync(entry, script)
  mkdirSync(home, { recursive: true })
  const logFd = openSync(join(home, 'layerd.log'), 'a')
  const { file, args } = holderCommand(home, [], { holderEntry: entry })
  try { return { home, front: spawn(file, args, { stdio: ['ignore', logFd, logFd], detached: true, env }) } } finally { closeSync(logFd) }
}

t.test('holderCommand() starts the holder through its C front when it is built', async t => {
  t.ok(HOLDER_FRONT.endsWith('native/build/Release/layerd-holder'), 'the front is the build\'s')
  const { file, args } = holderCommand(join(dir, 'x'))
  t.equal(file, HOLDER_FRONT, 'the front runs first (`npm run build` builds it)')
  t.equal(args[0], process.execPath, 'and is told which node runs the holder and layerd')
})

t.test('a layerd started by the front is the holder\'s child, restarted after a SIGKILL, stopped with the holder', async t => {
  const { home, pid: first, holder } = await startedHome(t, 'a')
  t.equal(parentOf(first), holder, 'layerd\'s parent is the holder (the front became it by exec)')
  t.match(readFileSync(`/proc/${holder}/cmdline`, 'utf8'), /holder\.js\0--adopt\0\d+:\d+\0/, 'the Node holder adopted it')
  const log = (): string => readFileSync(join(home, 'layerd.log'), 'utf8')
  // layerd answers without waiting for the holder (it may still be booting): wait for its line.
  await until('the holder says it adopted layerd', async () => new RegExp(`holder ${holder}: adopted layerd ${first} `).test(log()))
  await until('the holder hears that the adopted layerd serves', async () => log().includes(`holder: layerd ${first} serves`))
  if (process.getuid?.() === 0) {
    // The front boots the Node holder 10 nicer than layerd; the holder goes back, on every thread, once booted.
    t.match(readFileSync(`/proc/${holder}/cmdline`, 'utf8'), new RegExp(`\0--nice-back\0${getPriority()}\0`), 'the front booted the holder nicer')
    const nices = readdirSync(`/proc/${holder}/task`).map(tid => niceOf(holder, Number(tid)))
    t.same([...new Set(nices)], [getPriority()], 'every holder thread is back at the launcher\'s nice value')
    t.equal(niceOf(first), getPriority(), 'layerd never was nicer')
  }

  process.kill(first, 'SIGKILL')
  await until('a new layerd serves', async () => { const pid = await servingPid(home); return pid !== first })
  const second = await servingPid(home)
  t.equal(parentOf(second), holder, 'the holder started the next one')
  t.match(log(), new RegExp(`holder: layerd ${first} was killed by SIGKILL; starting a new one`), 'the holder saw the adopted one die, with its signal')

  process.kill(holder, 'SIGTERM')
  await until('the holder has stopped', async () => { try { process.kill(holder, 0); return false } catch { return true } })
  t.match(log(), new RegExp(`holder: layerd ${second} exited with code 0; the holder stops`), 'layerd stopped cleanly before the holder')
})

t.test('the adopted layerd\'s exit code reaches the holder: a clean stop of it ends the holder', async t => {
  const { home, pid, holder } = await startedHome(t, 'b')
  const client = await connectDaemon({ home, autoStart: false })
  await client.call('shutdown')
  client.close()
  await until('the holder has stopped', async () => { try { process.kill(holder, 0); return false } catch { return true } })
  t.match(readFileSync(join(home, 'layerd.log'), 'utf8'), new RegExp(`holder: layerd ${pid} exited with code 0; the holder stops`), 'exit code 0, read by waitid')
})

t.test('a second front for a home whose holder runs exits 3 and changes nothing', async t => {
  const { home, pid } = await startedHome(t, 'c')
  const holder = readFileSync(join(home, HOLDER_PID_FILE), 'utf8')
  const { file, args } = holderCommand(home)
  const code = await new Promise(resolve => spawn(file, args, { stdio: 'ignore' }).once('exit', resolve))
  t.equal(code, 3, 'the Node holder it falls back to says another holder runs')
  t.equal(readFileSync(join(home, HOLDER_PID_FILE), 'utf8'), holder, 'the pid file is the running holder\'s')
  t.equal(await servingPid(home), pid, 'the same layerd serves')
})

// A holder that dies: layerd sees the holder's socket close on its event loop (not at its next call, which may never
// come) and starts a new holder (rescue-holder.ts); with the rescue off, it serves on unprotected and says so.
const DYING_HOLDERS = [
  // in the window between the front's exec and the holder serving layerd's socket, before layerd's `ready`
  { name: 'd1', when: 'while it boots', script: 'process.exit(1)\n' },
  // after layerd's `ready` (sent without waiting for the answer: it lies unread in the holder's socket), with no call after it
  {
    name: 'd2',
    when: 'once layerd has said ready',
    script: `import { readFileSync } from 'node:fs'
const log = process.argv[process.argv.indexOf('--home') + 1] + '/layerd.log'
for (let i = 0; i < 1000 && !/layerd \\d+ serving /.test(readFileSync(log, 'utf8')); i++) await new Promise(resolve => setTimeout(resolve, 20))
process.exit(1)
`
  }
]
for (const { name, when, script } of DYING_HOLDERS) {
  t.test(`a holder that dies ${when}: the front's layerd starts a new holder, which takes it on`, async t => {
    const { home, front } = startWithHolder(t, `${name}r`, script)
    t.equal(await new Promise(resolve => front.once('exit', resolve)), 1, 'the holder died')
    await until('layerd serves', async () => { await servingPid(home); return true })
    const pid = await servingPid(home)
    await until('layerd hands its connections to a new holder', async () =>
      /the holder is gone \(its socket (hung up|failed: ECONNRESET)[^\n]*: 0 FUSE connection\(s\) handed to a new holder/.test(readFileSync(join(home, 'layerd.log'), 'utf8')))
    await until('the new holder serves layerd', async () => (await callHolder(home, 'status')).daemonPid === pid)
    t.equal((await callHolder(home, 'status')).pid, holderPid(home), 'holder.pid names the new holder')
    const client = await connectDaemon({ home, autoStart: false })
    try { t.equal((await client.call('ping')).connectionsKeptBy, 'holder', 'ping says a holder keeps its connections') } finally { client.close() }
  })
  t.test(`with the rescue off, a holder that dies ${when} leaves the front's layerd serving, unprotected, and saying so at once`, async t => {
    const { home, front } = startWithHolder(t, name, script, { ...process.env, LAYERD_HOLDER_RESCUE: '0' })
    t.equal(await new Promise(resolve => front.once('exit', resolve)), 1, 'the holder died')
    await until('layerd serves', async () => { await servingPid(home); return true })
    const pid = await servingPid(home)
    t.not(parentOf(pid), process.pid, 'layerd outlived its parent')
    await until('layerd says its connections are no longer kept', async () =>
      /the holder is gone \(its socket (hung up|failed: ECONNRESET)[^\n]*: FUSE connections will not survive this daemon/.test(readFileSync(join(home, 'layerd.log'), 'utf8')))
    const client = await connectDaemon({ home, autoStart: false })
    try { t.equal((await client.call('ping')).connectionsKeptBy, null, 'and ping says nothing keeps them') } finally { client.close() }
  })
}

t.test('the front\'s layerd serves while the Node holder is still booting, and the holder takes it on once up', async t => {
  // A holder 3.5 s slow to boot (under the 5 s layerd waits for an answer): layerd must not wait for it before it answers.
  const { home, front } = startWithHolder(t, 'e', `await new Promise(resolve => setTimeout(resolve, 3500))\nawait import(${JSON.stringify(HOLDER_ENTRY)})\n`)
  front.unref()
  const log = (): string => readFileSync(join(home, 'layerd.log'), 'utf8')
  let pid = 0
  let before = ''
  await until('layerd answers', async () => { pid = await servingPid(home); before = log(); return true })
  t.notMatch(before, /adopted layerd/, 'layerd answered before the holder was up')
  t.equal(await servingPid(home), pid)
  t.notMatch(log(), /adopted layerd/, 'and answers again: its `ready` does not wait for the holder\'s answer')
  await until('the holder hears that layerd serves', async () => log().includes(`holder: layerd ${pid} serves`))
  t.match(log(), new RegExp(`adopted layerd ${pid} `), 'the holder adopted it')
  t.notMatch(log(), /fd store failed|holder is gone/, 'layerd\'s requests waited in the socket for the holder, none failed')
})
