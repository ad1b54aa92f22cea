/**
 * layerd's run socket and layerctl's C front (issue 17): `layerctl run` served
 * by the daemon must answer exactly as the Node CLI does, end a run whose
 * caller hangs up, and send everything it does not serve back to the Node CLI.
 * Real layerd, real FUSE mount of the Debian python image, real sandboxes.
 */
import t, { type Test } from 'tap'
import { readFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { LAYERCTL_FRONT, layerdNode, mountsUnder, run } from '../../fixtures/layerd-harness.js'
import { pushInto } from '../../fixtures/store-steps.js'
import { ControlClient } from '../daemon/client/control-client.js'
import { socketPath } from '../daemon/client/control-protocol.js'
import { decodeFrames, encodeRunRequest, FRAME, runSocketPath, type RunFrame } from './run-protocol.js'

const images = await ensureDebianImages()
// Registered before t.testdir(), whose own teardown removes the directory: the daemon and its mounts must go first.
let stopNode = async (): Promise<void> => {}
t.teardown(async () => { await stopNode() })
const work = t.testdir()
const node = layerdNode(join(work, 'home'))
await pushInto(node.store, images.images['python-v1'].dockerArchive, 'deb/python:v1')
await node.startDaemon()
stopNode = async () => { await node.stopDaemon() }
const front = async (...args: string[]): Promise<{ code: number, stdout: string, stderr: string }> => await run(LAYERCTL_FRONT, args, node.env)

/** Send raw bytes to the run socket; resolves to the frames answered once layerd closes. */
async function exchange (request: Buffer, opts: { onFrame?: (f: RunFrame, hangUp: () => void) => void } = {}): Promise<RunFrame[]> {
  return await new Promise((resolve, reject) => {
    const socket = connect(runSocketPath(node.home))
    const frames: RunFrame[] = []
    let rest: Buffer = Buffer.alloc(0)
    socket.on('connect', () => socket.write(request))
    socket.on('data', chunk => {
      const got = decodeFrames(Buffer.concat([rest, chunk]))
      rest = got.rest
      for (const f of got.frames) { frames.push(f); opts.onFrame?.(f, () => socket.destroy()) }
    })
    socket.on('error', reject)
    socket.on('close', () => resolve(frames))
  })
}

const sandboxes = async (): Promise<Array<{ id: string, ownerPid: number }>> => JSON.parse((await node.layerctl('ps', '--json')).stdout)

t.test('the C front\'s `run` comes back as the command left it: stdout, stderr and the exit code', async t => {
  const r = await front('run', 'deb/python:v1', '--', 'sh', '-c', 'echo out; echo err >&2; exit 7')
  t.equal(r.code, 7)
  t.equal(r.stdout, 'out\n')
  t.equal(r.stderr, 'err\n')
  const big = await front('run', '--tier', 'container', 'deb/python:v1', '--', 'python3', '-c', 'import sys; sys.stdout.write("x" * 3_000_000); sys.stderr.write("done")')
  t.equal(big.code, 0, big.stderr)
  t.equal(big.stdout.length, 3_000_000, 'all of a large output arrives before the exit code')
  t.equal(big.stderr, 'done')
})

/** The pid of the process that created a kept sandbox by the C front, checked to be layerd's runner. */
async function runnerPid (t: Test): Promise<number> {
  const r = await front('run', '--keep', 'deb/python:v1', '--', 'true')
  t.equal(r.code, 0, r.stderr)
  const id = /kept sandbox (sb-[0-9a-f]{12})/.exec(r.stderr)?.[1]
  t.ok(id, 'the kept sandbox is named on stderr, as the Node CLI names it')
  const pid = (await sandboxes()).find(s => s.id === id)?.ownerPid ?? -1
  t.match(await readFile(`/proc/${pid}/cmdline`, 'utf8'), /runner\.js/, 'the sandbox was made by layerd\'s runner, not a Node CLI')
  t.match(await readFile(`/proc/${pid}/status`, 'utf8'), new RegExp(`\nPPid:\\s+${await node.daemonPid()}\n`), 'which layerd started')
  t.equal((await node.layerctl('rm', id!)).code, 0)
  return pid
}

t.test('the C front\'s `run` is served by layerd\'s runner, which layerd starts again when it dies', async t => {
  const first = await runnerPid(t)
  process.kill(first, 'SIGKILL')
  while (await readFile(`/proc/${first}/status`, 'utf8').then(s => !/State:\s+Z/.test(s), () => false)) await new Promise(resolve => setTimeout(resolve, 50))
  const second = await runnerPid(t)
  t.not(second, first, 'a new runner serves the next run')
})

t.test('a connection the runner does not take (it is stopped) goes to a new runner, not lost', async t => {
  const wedged = await runnerPid(t)
  process.kill(wedged, 'SIGSTOP')
  try {
    // layerd keeps its copy of the connection until a runner says it took it: after 10 s it kills this one and hands it on.
    const r = await front('run', 'deb/python:v1', '--', 'sh', '-c', 'echo served')
    t.equal(r.code, 0, r.stderr)
    t.equal(r.stdout, 'served\n')
    const next = await runnerPid(t)
    t.not(next, wedged, 'a new runner serves it')
  } finally {
    try { process.kill(wedged, 'SIGKILL') } catch {}
  }
})

t.test('a usage error and an unknown image answer as the Node CLI answers them', async t => {
  for (const args of [['run'], ['run', '--tier', 'nope', 'deb/python:v1', '--', 'true'], ['run', 'deb/absent:v1', '--', 'true'], ['ps', '--json']]) {
    const viaFront = await front(...args)
    const viaNode = await node.layerctl(...args)
    t.same(viaFront, viaNode, `layerctl ${args.join(' ')}`)
  }
})

t.test('a run whose caller hangs up is ended and its sandbox destroyed', async t => {
  const before = await mountsUnder(join(node.home, 'sandboxes'))
  const request = encodeRunRequest({ cwd: '/', argv: ['run', 'deb/python:v1', '--', 'sh', '-c', 'echo started; exec sleep 60'], env: { LAYERD_HOME: node.home, LAYERD_STORE: node.store } })
  const started = performance.now()
  const frames = await exchange(request, { onFrame: (f, hangUp) => { if (f.type === FRAME.STDOUT) hangUp() } })
  t.equal(frames[0]?.payload.toString(), 'started\n')
  const deadline = Date.now() + 20_000
  while ((await sandboxes()).length > 0 && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 100))
  t.same(await sandboxes(), [], 'no sandbox is left')
  t.ok(performance.now() - started < 30_000, 'the sleep was killed, not waited for')
  t.equal(await mountsUnder(join(node.home, 'sandboxes')), before, 'no sandbox mount is left')
})

t.test('what layerd does not serve gets the fallback frame, and layerd lives on', async t => {
  const env = { LAYERD_HOME: node.home, LAYERD_STORE: node.store }
  const other = await exchange(encodeRunRequest({ cwd: '/', argv: ['run', '--home', join(work, 'other'), 'deb/python:v1', '--', 'true'], env }))
  t.same(other.map(f => f.type), [FRAME.FALLBACK], 'another home')
  const relative = await exchange(encodeRunRequest({ cwd: '/', argv: ['run', 'deb/python:v1', '--', 'true'], env: { ...env, LAYERD_HOME: 'home' } }))
  t.same(relative.map(f => f.type), [FRAME.FALLBACK], 'a relative home (resolved against the caller\'s cwd, not the daemon\'s)')
  const notRun = await exchange(encodeRunRequest({ cwd: '/', argv: ['daemon', 'stop'], env }))
  t.same(notRun.map(f => f.type), [FRAME.FALLBACK], 'a command other than run')
  const garbage = Buffer.from([5, 0, 0, 0, 1, 2, 3, 4, 5])
  t.same((await exchange(garbage)).map(f => f.type), [FRAME.FALLBACK], 'bytes that are not a request')
  const huge = Buffer.alloc(8); huge.writeUInt32LE(0xffffffff)
  t.same((await exchange(huge)).map(f => f.type), [FRAME.FALLBACK], 'a length over the limit')
  const client = await ControlClient.connect(socketPath(node.home))
  t.ok((await client.call('ping')).pid > 0, 'layerd still answers')
  client.close()
  const r = await front('run', 'deb/python:v1', '--', 'true')
  t.equal(r.code, 0, 'and still runs')
})

t.test('layerd stopping ends its runner and the run in flight, leaving no sandbox', async t => {
  const runner = await runnerPid(t)
  const request = encodeRunRequest({ cwd: '/', argv: ['run', 'deb/python:v1', '--', 'sh', '-c', 'echo started; exec sleep 60'], env: { LAYERD_HOME: node.home, LAYERD_STORE: node.store } })
  let stopped: Promise<void> | undefined
  const frames = await exchange(request, { onFrame: f => { if (f.type === FRAME.STDOUT) stopped ??= node.stopDaemon() } })
  await stopped
  t.equal(frames[0]?.payload.toString(), 'started\n')
  t.notOk(frames.some(f => f.type === FRAME.EXIT && f.payload.readInt32LE() === 0), 'the run did not end as a success')
  await t.rejects(readFile(`/proc/${runner}/status`), 'the runner is gone')
  t.same(JSON.parse((await node.layerctl('ps', '--json')).stdout), [], 'no sandbox is left')
  t.equal(await mountsUnder(node.home), 0, 'nothing is mounted under the home')
})
