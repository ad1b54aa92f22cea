/**
 * layerd's cold start, spawn to serving, as `layerctl` starts it (the holder's
 * C front, which starts layerd and the Node holder beside it; a build without
 * the front: the Node holder, which starts layerd): at a fresh home, the time until the control socket
 * accepts a connection, until it answers `ping`, and until it serves a
 * request that needs the node's database, cache and mounts (`mounts`).
 * With `--old DIR` (another built checkout) both builds run, interleaved,
 * the order alternating per rep.
 *
 *   node dist/bench/daemon-start.js [--old DIR] [--reps N] [--drop-caches] [--starts front,node,alone] [--no-holder | --node-holder] [--modules] [--out DIR]
 *
 * `--starts`: the ways to start, each a row, interleaved (default `front`):
 * `front` as layerctl starts it; `node` the Node holder directly, without
 * its C front (the start before the front); `alone` layerd without a holder
 * (LAYERD_HOLDER=0's way). `--no-holder` and `--node-holder` are
 * `--starts alone` and `--starts node`.
 *
 * Each build runs its daemon entry as its launcher does: dist/layerd/layerd.cjs
 * (the bundle with its code cache) where the build has one, else
 * dist/layerd/main.js; `--modules` adds, for this build, the same rows
 * running the unbundled dist/layerd/main.js, interleaved.
 *
 * `--drop-caches` drops the page cache before each start (root), as
 * bench/cold-start.ts does before each of its reps: every module, addon and
 * the node binary are then read from disk. The warm standby is off (it
 * would start 3 s later anyway). Each start is stopped (SIGTERM, waited for) before the
 * next, and its layerd with it when the holder ended before it could stop it (signalled during its boot).
 *
 * Bench-only: may import anything.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createConnection, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { holderCommand } from '../src/daemon/client/daemon-launcher.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { daemonEntryOf, dropPageCaches, fmt, markdownTable, median, REPO_ROOT, REPORT_OPTIONS, runInterleaved, startLoadSampler, writeReport } from './bench-report.js'

const SPEC = {
  old: { type: 'string', value: 'DIR' },
  reps: { type: 'string', default: '8', value: 'N' },
  'drop-caches': { type: 'boolean' },
  'no-holder': { type: 'boolean' },
  'node-holder': { type: 'boolean' },
  starts: { type: 'string', value: 'LIST' },
  modules: { type: 'boolean' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('daemon-start', SPEC)
const REPS = ARGS.number('reps', { min: 1 })
const DROP = ARGS.flag('drop-caches')
const START_WAYS = ['front', 'node', 'alone'] as const
type StartWay = typeof START_WAYS[number]
const STARTS: StartWay[] = (() => {
  const list = ARGS.optString('starts') ?? (ARGS.flag('no-holder') ? 'alone' : ARGS.flag('node-holder') ? 'node' : 'front')
  const ways = list.split(',')
  const bad = ways.find(w => !(START_WAYS as readonly string[]).includes(w))
  if (bad !== undefined) throw new Error(`daemon-start: --starts ${JSON.stringify(list)}: ${JSON.stringify(bad)} is not one of ${START_WAYS.join(', ')}`)
  return [...new Set(ways as StartWay[])]
})()
const START_TITLES: Record<StartWay, string> = {
  front: 'the holder\'s C front: layerd, and the Node holder beside it',
  node: 'the Node holder, then layerd',
  alone: 'layerd alone'
}
const POLL_MS = 2
const GIVE_UP_MS = 30_000

interface Sample { acceptMs: number, pingMs: number, servesMs: number }

/** Connect to `path`, retrying every POLL_MS until it accepts. */
async function connectWhenUp (path: string, t0: number): Promise<Socket> {
  for (;;) {
    const socket = await new Promise<Socket | undefined>(resolve => {
      const s = createConnection(path)
      s.once('connect', () => resolve(s))
      s.once('error', () => { s.destroy(); resolve(undefined) })
    })
    if (socket !== undefined) return socket
    if (performance.now() - t0 > GIVE_UP_MS) throw new Error(`${path} did not accept within ${GIVE_UP_MS} ms`)
    await new Promise(resolve => setTimeout(resolve, POLL_MS))
  }
}

/** Send one control request on `socket` and wait for its answer line; throws the answer's error. */
async function call (socket: Socket, id: number, method: string): Promise<void> {
  socket.write(JSON.stringify({ id, method, params: {} }) + '\n')
  const line = await new Promise<string>((resolve, reject) => {
    let buffered = ''
    const onData = (d: Buffer): void => {
      buffered += d.toString('utf8')
      const nl = buffered.indexOf('\n')
      if (nl === -1) return
      socket.off('data', onData)
      resolve(buffered.slice(0, nl))
    }
    socket.on('data', onData)
    socket.once('close', () => reject(new Error(`the socket closed before the answer to ${method}`)))
  })
  const answer = JSON.parse(line) as { error?: { message: string } }
  if (answer.error !== undefined) throw new Error(`${method}: ${answer.error.message}`)
}

/** One cold start, the way `way`, of the daemon entry `main` of the build in `dist` (of the checkout `root`) at a fresh home. */
async function coldStart (root: string, dist: string, main: string, way: StartWay): Promise<Sample> {
  const home = await mkdtemp(join(tmpdir(), 'layerd-bench-start-'))
  if (DROP) await dropPageCaches()
  const { file, args } = way !== 'alone'
    ? holderCommand(home, [], { front: way === 'front', daemonEntry: main, holderEntry: join(dist, 'layerd/holder.js'), holderFront: join(root, 'native/build/Release/layerd-holder') })
    : { file: process.execPath, args: ['--max-semi-space-size=1', main, '--foreground', '--home', home] }
  const t0 = performance.now()
  const child: ChildProcess = spawn(file, args, { stdio: 'ignore', env: { ...process.env, LAYERD_WARM_STANDBY: '0' } })
  const exited = new Promise(resolve => child.once('exit', resolve))
  try {
    const socket = await connectWhenUp(join(home, 'layerd.sock'), t0)
    const acceptMs = performance.now() - t0
    try {
      await call(socket, 1, 'ping')
      const pingMs = performance.now() - t0
      await call(socket, 2, 'mounts')
      return { acceptMs, pingMs, servesMs: performance.now() - t0 }
    } finally { socket.destroy() }
  } finally {
    child.kill('SIGTERM')
    await exited
    // A holder signalled while its Node side still boots (the front started layerd first) ends alone: stop its layerd too.
    await stopLeftDaemon(home)
    await rm(home, { recursive: true, force: true })
  }
}

/** SIGTERM the layerd named by `<home>/layerd.pid` if it still runs, and wait (up to 10 s) until it has gone. Async. */
async function stopLeftDaemon (home: string): Promise<void> {
  let pid: number
  try { pid = Number((await readFile(join(home, 'layerd.pid'), 'utf8')).trim()) } catch { return }
  if (!Number.isSafeInteger(pid) || pid <= 0) return
  // Only that layerd: its pid may have been reused if it ended as it should.
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')
  if (!cmdline.includes(`\0${home}\0`) && !cmdline.endsWith(`\0${home}`)) return
  try { process.kill(pid, 'SIGTERM') } catch { return }
  for (let i = 0; i < 200; i++) {
    try { process.kill(pid, 0) } catch { return }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  throw new Error(`layerd ${pid} (home ${home}) did not stop within 10 s of SIGTERM`)
}

async function main (): Promise<void> {
  const old = ARGS.optString('old')
  const modules = ARGS.flag('modules')
  const command = `node dist/bench/daemon-start.js${old === undefined ? '' : ` --old ${old}`} --reps ${REPS}${DROP ? ' --drop-caches' : ''}${STARTS.join() === 'front' ? '' : ` --starts ${STARTS.join()}`}${modules ? ' --modules' : ''}`
  const entry = (root: string): string => daemonEntryOf(join(root, 'dist'))
  const builds = [{ name: 'this build', root: REPO_ROOT, main: entry(REPO_ROOT) },
    ...(modules ? [{ name: 'this build, unbundled (main.js)', root: REPO_ROOT, main: join(REPO_ROOT, 'dist/layerd/main.js') }] : []),
    ...(old === undefined ? [] : [{ name: `old (${old})`, root: resolve(old), main: entry(resolve(old)) }])]
  const sides = builds.flatMap(b => STARTS.map(way => ({ name: STARTS.length === 1 ? b.name : `${b.name}, ${way}`, root: b.root, main: b.main, way })))
  const load = startLoadSampler()
  const samples = await runInterleaved(REPS, sides.map(s => ({ name: s.name, run: async () => await coldStart(s.root, join(s.root, 'dist'), s.main, s.way) })),
    s => `accepts ${fmt(s.acceptMs, 0)} ms, ping ${fmt(s.pingMs, 0)} ms, serves ${fmt(s.servesMs, 0)} ms`, { rotate: true })
  const loadFigures = load.stop()
  const rows = sides.map(s => {
    const xs = samples.get(s.name)!
    return [s.name, fmt(median(xs.map(x => x.acceptMs)), 0), fmt(median(xs.map(x => x.pingMs)), 0), fmt(median(xs.map(x => x.servesMs)), 0)]
  })
  await writeReport({
    name: 'daemon-start',
    title: `layerd cold start, spawn to serving (${STARTS.map(w => `${w}: ${START_TITLES[w]}`).join('; ')}${DROP ? ', page cache dropped' : ''}), medians of ${REPS}`,
    command,
    load: loadFigures,
    markdown: markdownTable(['build, start', 'socket accepts ms', 'ping answered ms', 'serves (`mounts` answered) ms'], rows),
    data: { reps: REPS, dropCaches: DROP, starts: STARTS, samples: Object.fromEntries(samples) }
  }, ARGS.string('out'))
}

await main()
