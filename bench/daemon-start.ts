/**
 * layerd's cold start, spawn to serving, as `layerctl` starts it (the holder,
 * which starts layerd): at a fresh home, the time until the control socket
 * accepts a connection, until it answers `ping`, and until it serves a
 * request that needs the node's database, cache and mounts (`mounts`).
 * With `--old DIR` (another built checkout) both builds run, interleaved,
 * the order alternating per rep.
 *
 *   node dist/bench/daemon-start.js [--old DIR] [--reps N] [--drop-caches] [--no-holder] [--modules] [--out DIR]
 *
 * `--drop-caches` drops the page cache before each start (root), as
 * bench/cold-start.ts does before each of its reps: every module, addon and
 * the node binary are then read from disk. `--no-holder` starts layerd
 * alone (LAYERD_HOLDER=0's way). Each build runs its daemon entry as
 * its launcher does: dist/layerd/layerd.cjs (the bundle with its code cache)
 * where the build has one, else dist/layerd/main.js; `--modules` adds a
 * side, interleaved, that runs this build's unbundled dist/layerd/main.js. The warm standby is off (it would start
 * 3 s later anyway). Each start is stopped (SIGTERM, waited for) before the
 * next.
 *
 * Bench-only: may import anything.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { createConnection, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { dropPageCaches, fmt, markdownTable, median, REPO_ROOT, REPORT_OPTIONS, runInterleaved, startLoadSampler, writeReport } from './bench-report.js'

const SPEC = {
  old: { type: 'string', value: 'DIR' },
  reps: { type: 'string', default: '8', value: 'N' },
  'drop-caches': { type: 'boolean' },
  'no-holder': { type: 'boolean' },
  modules: { type: 'boolean' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('daemon-start', SPEC)
const REPS = ARGS.number('reps', { min: 1 })
const DROP = ARGS.flag('drop-caches')
const HOLDER = !ARGS.flag('no-holder')
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

/** The daemon entry a build's launcher starts: the bundled start where the build has one (layerd/layerd.cts), else the modules' entry. */
function daemonEntryOf (dist: string): string {
  const bundled = join(dist, 'layerd/layerd.cjs')
  return existsSync(bundled) ? bundled : join(dist, 'layerd/main.js')
}

/** One cold start of the daemon entry `main` at a fresh home. */
async function coldStart (main: string): Promise<Sample> {
  const home = await mkdtemp(join(tmpdir(), 'layerd-bench-start-'))
  if (DROP) await dropPageCaches()
  const args = HOLDER
    ? ['--max-semi-space-size=1', join(dirname(main), 'holder.js'), '--home', home, '--entry', main, '--']
    : ['--max-semi-space-size=1', main, '--foreground', '--home', home]
  const t0 = performance.now()
  const child: ChildProcess = spawn(process.execPath, args, { stdio: 'ignore', env: { ...process.env, LAYERD_WARM_STANDBY: '0' } })
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
    await rm(home, { recursive: true, force: true })
  }
}

async function main (): Promise<void> {
  const old = ARGS.optString('old')
  const modules = ARGS.flag('modules')
  const command = `node dist/bench/daemon-start.js${old === undefined ? '' : ` --old ${old}`} --reps ${REPS}${DROP ? ' --drop-caches' : ''}${HOLDER ? '' : ' --no-holder'}${modules ? ' --modules' : ''}`
  const sides = [{ name: 'this build', main: daemonEntryOf(join(REPO_ROOT, 'dist')) },
    ...(modules ? [{ name: 'this build, unbundled (main.js)', main: join(REPO_ROOT, 'dist/layerd/main.js') }] : []),
    ...(old === undefined ? [] : [{ name: `old (${old})`, main: daemonEntryOf(join(resolve(old), 'dist')) }])]
  const load = startLoadSampler()
  const samples = await runInterleaved(REPS, sides.map(s => ({ name: s.name, run: async () => await coldStart(s.main) })),
    s => `accepts ${fmt(s.acceptMs, 0)} ms, ping ${fmt(s.pingMs, 0)} ms, serves ${fmt(s.servesMs, 0)} ms`, { rotate: true })
  const loadFigures = load.stop()
  const rows = sides.map(s => {
    const xs = samples.get(s.name)!
    return [s.name, fmt(median(xs.map(x => x.acceptMs)), 0), fmt(median(xs.map(x => x.pingMs)), 0), fmt(median(xs.map(x => x.servesMs)), 0)]
  })
  await writeReport({
    name: 'daemon-start',
    title: `layerd cold start, spawn to serving (${HOLDER ? 'holder, then layerd' : 'layerd alone'}${DROP ? ', page cache dropped' : ''}), medians of ${REPS}`,
    command,
    load: loadFigures,
    markdown: markdownTable(['build', 'socket accepts ms', 'ping answered ms', 'serves (`mounts` answered) ms'], rows),
    data: { reps: REPS, dropCaches: DROP, holder: HOLDER, samples: Object.fromEntries(samples) }
  }, ARGS.string('out'))
}

await main()
