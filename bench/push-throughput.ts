/**
 * Push throughput on the real Debian python image, side by side with
 * `tar | zstd -3` and `tar | gzip -6` of the same tree (issue 2).
 *
 *   node dist/bench/push-throughput.js [--reps N] [--no-profile] [--work DIR] [--out DIR]
 *
 * Image size: the bytes of a plain tar of python-v1's merged tree
 * (`tar -C ROOTFS -cf - . | wc -c`); every MB/s figure is that over wall
 * seconds. Contenders, interleaved (the order rotates with each repetition:
 * the one run first after another's output was ~5% slower), each repetition:
 * - `layerctl push ROOTFS_DIR` into a fresh LAYERD_HOME with its default
 *   fs store (same disk as everything else);
 * - `layerctl push python-v1.docker.tar` (docker-archive), fresh home;
 * - the same push again into a store a first (untimed) push filled (every
 *   chunk already there);
 * - `tar -C ROOTFS -cf - . | zstd -3 -T1 > out.zst`;
 * - `tar -C ROOTFS -cf - . | gzip -6 > out.gz`.
 * The source tree is read once before timing, so all read it from the page
 * cache, and every contender starts after a `sync` (untimed), so none pays
 * for the writeback of another's output. Also reported: CPU seconds (user + system, all threads and
 * children) per contender, which the machine's load disturbs less.
 *
 * Then, unless --no-profile, one more push of the directory under
 * `node --cpu-prof` (main thread and encoder workers), and the top 10
 * functions by self time.
 *
 * Bench-only: may import anything.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { fmt, LAYERCTL_JS, REPORT_OPTIONS, markdownTable, MB, median, runInterleaved, shq, startLoadSampler, timeShell, writeReport, type Timed } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const SPEC = {
  reps: { type: 'string', default: '5', value: 'N' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  'no-profile': { type: 'boolean' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('push-throughput', SPEC)
const REPS = ARGS.number('reps', { min: 1 }) // = the number of contenders: with the rotation, each runs once in each position
const PROFILE = !ARGS.flag('no-profile')
const TOP_FUNCTIONS = 10

interface Sample extends Timed { outputBytes: number }

/**
 * Untimed, before every contender: write back what the previous one left
 * dirty. zstd and gzip write their output without fsync, push fsyncs its
 * store; without this the contender after gzip (always the directory push)
 * paid for gzip's writeback.
 */
async function settle (): Promise<void> {
  await timeShell('sync')
}

async function duBytes (path: string): Promise<number> {
  return Number((await timeShell(`du -sb ${shq(path)} | cut -f1`)).stdout.trim())
}

async function main (): Promise<void> {
  const imgs = await ensureDebianImages()
  const py = imgs.images['python-v1']
  const rootfs = py.rootfs
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-push-'))
  const command = `node dist/bench/push-throughput.js --reps ${REPS}${PROFILE ? '' : ' --no-profile'}`
  console.error(`${command}\n  work dir ${work}`)
  const load = startLoadSampler()
  try {
    // Warm the page cache with the source, and measure the image size.
    const imageBytes = Number((await timeShell(`tar -C ${shq(rootfs)} -cf - . | wc -c`)).stdout.trim())
    await timeShell(`cat ${shq(py.dockerArchive)} > /dev/null`)
    console.error(`  image: plain tar of ${rootfs} = ${imageBytes} bytes (${fmt(imageBytes / MB, 1)} MB)`)

    const homeEnv = (home: string): NodeJS.ProcessEnv => ({ ...process.env, LAYERD_HOME: home, LAYERD_STORE: `file://${join(home, 'store')}` })
    /** Push `src` into a fresh home. */
    const push = (label: string, src: string) => async (rep: number): Promise<Sample> => {
      const home = join(work, `${label}-${rep}`)
      await settle()
      const t = await timeShell(`mkdir -p ${shq(home)} && exec node ${shq(LAYERCTL_JS)} push ${shq(src)} bench/python:v1`, { env: homeEnv(home) })
      const outputBytes = await duBytes(join(home, 'store'))
      await rm(home, { recursive: true, force: true })
      return { ...t, outputBytes }
    }
    /** Push `src` into a fresh home (untimed), then again (timed): every chunk is already stored. */
    const repush = (label: string, src: string) => async (rep: number): Promise<Sample> => {
      const home = join(work, `${label}-${rep}`)
      const env = homeEnv(home)
      await timeShell(`mkdir -p ${shq(home)} && exec node ${shq(LAYERCTL_JS)} push ${shq(src)} bench/python:v1`, { env })
      const before = await duBytes(join(home, 'store'))
      await settle()
      const t = await timeShell(`exec node ${shq(LAYERCTL_JS)} push ${shq(src)} bench/python:again`, { env })
      const outputBytes = await duBytes(join(home, 'store')) - before
      await rm(home, { recursive: true, force: true })
      return { ...t, outputBytes }
    }
    const compress = (tool: string, ext: string) => async (rep: number): Promise<Sample> => {
      const out = join(work, `out-${rep}.${ext}`)
      await settle()
      const t = await timeShell(`tar -C ${shq(rootfs)} -cf - . | ${tool} > ${shq(out)}`)
      const outputBytes = await duBytes(out)
      await rm(out, { force: true })
      return { ...t, outputBytes }
    }
    const contenders = [
      { name: 'layerctl push (directory)', run: push('dir', rootfs) },
      { name: 'layerctl push (docker-archive)', run: push('docker', py.dockerArchive) },
      { name: 'layerctl push (docker-archive) again, all chunks stored', run: repush('repush', py.dockerArchive) },
      { name: 'tar | zstd -3 -T1', run: compress('zstd -3 -T1 -q', 'zst') },
      { name: 'tar | gzip -6', run: compress('gzip -6', 'gz') }
    ]
    const samples = await runInterleaved(REPS, contenders, s => `${fmt(s.seconds)} s wall, ${fmt(s.cpuSeconds)} s CPU`, { rotate: true })

    const figures = contenders.map(c => {
      const xs = samples.get(c.name)!
      const seconds = median(xs.map(s => s.seconds))
      const cpuSeconds = median(xs.map(s => s.cpuSeconds))
      return { name: c.name, seconds, cpuSeconds, mbPerS: imageBytes / MB / seconds, mbPerCpuS: imageBytes / MB / cpuSeconds, outputBytes: median(xs.map(s => s.outputBytes)), samples: xs.map(({ stdout: _, ...s }) => s) }
    })
    const [dirPush, dockerPush, , zstd, gzip] = figures as [typeof figures[0], typeof figures[0], typeof figures[0], typeof figures[0], typeof figures[0]]
    const rows = figures.map(f => [
      f.name, fmt(f.seconds), fmt(f.mbPerS, 1), fmt(f.cpuSeconds), fmt(f.mbPerCpuS, 1), fmt(f.outputBytes / MB, 1),
      fmt(f.seconds / zstd.seconds), fmt(gzip.seconds / f.seconds)
    ])
    const ratios = {
      dirPushOverZstdWall: dirPush.seconds / zstd.seconds,
      dirPushOverZstdCpu: dirPush.cpuSeconds / zstd.cpuSeconds,
      gzipOverDirPushWall: gzip.seconds / dirPush.seconds,
      dockerPushOverZstdWall: dockerPush.seconds / zstd.seconds,
      gzipOverDockerPushWall: gzip.seconds / dockerPush.seconds
    }
    let markdown = [
      `Image: python-v1 merged tree, plain tar = **${imageBytes} bytes (${fmt(imageBytes / MB, 1)} MB)**; MB/s = that / wall seconds. ` +
        `Medians of ${REPS} interleaved repetitions; the source tree is in the page cache; outputs on the same disk (fs store: fsync on, the product default).`,
      '',
      markdownTable(['contender', 'wall s', 'MB/s', 'CPU s', 'MB per CPU s', 'output MB', 'time / zstd', 'gzip time / this'], rows),
      '',
      `Targets (issue 2): faster than gzip → directory push is **${fmt(ratios.gzipOverDirPushWall)}x** faster than gzip -6 (docker-archive: ${fmt(ratios.gzipOverDockerPushWall)}x); ` +
        `within 2x of zstd -3 → directory push takes **${fmt(ratios.dirPushOverZstdWall)}x** zstd's wall time (docker-archive: ${fmt(ratios.dockerPushOverZstdWall)}x), ` +
        `${fmt(ratios.dirPushOverZstdCpu)}x its CPU time. Push uses encoder worker threads (up to 2 cores here); zstd -T1 and gzip use one. ` +
        'The re-push row pushes the docker-archive into a fresh store (untimed), then again (timed; output MB = bytes the store grew by). ' +
        'The contenders\' order rotates with each repetition, and each starts after a sync.'
    ].join('\n')

    let profile: ProfileFigures | undefined
    if (PROFILE) {
      profile = await profilePush(work, rootfs)
      markdown += '\n\n' + profileMarkdown(profile)
    }
    await writeReport({ name: 'push-throughput', title: 'Push throughput: layerctl push vs tar | zstd -3 and tar | gzip -6', command, load: load.stop(), markdown, data: { imageBytes, reps: REPS, figures, ratios, profile } }, ARGS.string('out'))
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}

// ---- CPU profile

interface ProfileNode { id: number, callFrame: { functionName: string, url: string, lineNumber: number }, children?: number[] }
interface CpuProfile { nodes: ProfileNode[], samples: number[], timeDeltas: number[], startTime: number, endTime: number }
interface FunctionTime { fn: string, where: string, thread: string, selfMs: number }
interface ThreadTime { thread: string, file: string, sampledMs: number, idleMs: number }
interface ProfileFigures { command: string, wallSeconds: number, top: FunctionTime[], topMain: FunctionTime[], threads: ThreadTime[] }

async function profilePush (work: string, rootfs: string): Promise<ProfileFigures> {
  const home = join(work, 'profile-home')
  const profDir = join(work, 'cpu-prof')
  const env = { ...process.env, LAYERD_HOME: home, LAYERD_STORE: `file://${join(home, 'store')}` }
  const cmd = `node --cpu-prof --cpu-prof-dir=${profDir} dist/cli/layerctl.js push ROOTFS bench/python:v1`
  console.error(`  profiling: ${cmd}`)
  const t = await timeShell(`mkdir -p ${shq(home)} && exec node --cpu-prof --cpu-prof-dir=${shq(profDir)} ${shq(LAYERCTL_JS)} push ${shq(rootfs)} bench/python:v1`, { env })
  const files = (await readdir(profDir)).filter(f => f.endsWith('.cpuprofile')).sort()
  const all: FunctionTime[] = []
  const threads: ThreadTime[] = []
  for (const file of files) {
    const prof = JSON.parse(await readFile(join(profDir, file), 'utf8')) as CpuProfile
    // File names are CPU.<date>.<time>.<pid>.<thread id>.<seq>.cpuprofile; thread 0 is the main thread.
    const threadId = file.split('.').at(-3) ?? '?'
    const thread = threadId === '0' ? 'main' : `worker ${threadId}`
    const byId = new Map(prof.nodes.map(n => [n.id, n]))
    const self = new Map<number, number>()
    prof.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0)))
    const byFn = new Map<string, FunctionTime>()
    let sampledUs = 0
    let idleUs = 0
    for (const [id, us] of self) {
      const cf = byId.get(id)!.callFrame
      sampledUs += us
      if (cf.functionName === '(idle)') { idleUs += us; continue }
      const where = cf.url === '' ? '' : `${cf.url.replace(/^file:\/\/.*?\/(dist|node_modules)\//, '$1/')}:${cf.lineNumber + 1}`
      const key = `${cf.functionName}@${where}`
      const f = byFn.get(key) ?? { fn: cf.functionName === '' ? '(anonymous)' : cf.functionName, where, thread, selfMs: 0 }
      f.selfMs += us / 1000
      byFn.set(key, f)
    }
    all.push(...byFn.values())
    threads.push({ thread, file, sampledMs: sampledUs / 1000, idleMs: idleUs / 1000 })
  }
  // One row per function over all threads (the encoder workers run the same code), naming the threads.
  const merged = new Map<string, FunctionTime>()
  for (const f of all) {
    const key = `${f.fn}@${f.where}`
    const m = merged.get(key)
    if (m === undefined) merged.set(key, { ...f })
    else {
      m.selfMs += f.selfMs
      if (!m.thread.split(', ').includes(f.thread)) m.thread += `, ${f.thread}`
    }
  }
  const top = [...merged.values()].sort((a, b) => b.selfMs - a.selfMs).slice(0, TOP_FUNCTIONS)
  const topMain = all.filter(f => f.thread === 'main').sort((a, b) => b.selfMs - a.selfMs).slice(0, TOP_FUNCTIONS)
  await rm(home, { recursive: true, force: true })
  return { command: cmd, wallSeconds: t.seconds, top, topMain, threads }
}

function profileMarkdown (p: ProfileFigures): string {
  const busyMs = p.threads.reduce((n, t) => n + t.sampledMs - t.idleMs, 0)
  return [
    `### CPU profile of one directory push`,
    '',
    `\`${p.command}\` (${fmt(p.wallSeconds)} s wall under the profiler). Threads: ` +
      p.threads.map(t => `${t.thread} ${fmt((t.sampledMs - t.idleMs) / 1000)} s busy of ${fmt(t.sampledMs / 1000)} s`).join('; ') + '.',
    '',
    `Top ${TOP_FUNCTIONS} functions by self time, summed over threads (share of all non-idle samples):`,
    '',
    markdownTable(['self ms', 'share', 'threads', 'function', 'where'],
      p.top.map(f => [fmt(f.selfMs, 0), `${fmt(f.selfMs / busyMs * 100, 1)}%`, f.thread, `\`${f.fn}\``, f.where === '' ? '(native/VM)' : `\`${f.where}\``])),
    '',
    `Main thread only (it feeds the workers: reading, tar parsing, chunking, packing):`,
    '',
    markdownTable(['self ms', 'function', 'where'],
      p.topMain.map(f => [fmt(f.selfMs, 0), `\`${f.fn}\``, f.where === '' ? '(native/VM)' : `\`${f.where}\``])),
    '',
    'Self times are V8 sampling-profiler times: on a loaded machine they include time the thread was runnable but descheduled, so read them as shares, not CPU seconds.'
  ].join('\n')
}

await main()
