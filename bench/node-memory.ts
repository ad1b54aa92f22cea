/**
 * Node memory benchmark (issue 14): the node's peak memory with layerd's
 * proactive reclaim on and off, in one run. A density workload: N process
 * sandboxes of the python image (createSandbox, the sandbox path: a shared
 * base mount, an overlay each), C at a time; each reads its working set
 * (every file under /usr, then `python3 -c 'import …'`), holds for a moment
 * as a task would, and is destroyed.
 *
 *   node dist/bench/node-memory.js [--sandboxes N] [--concurrency C] [--hold-ms MS]
 *                                  [--target SIZE] [--reps R] [--work DIR] [--out DIR]
 *
 * What is measured, per side (each in a fresh home, cold chunk cache; the
 * store's files dropped from the page cache first, so neither side finds
 * the other's pages):
 *   - peak memory of the node's workload: layerd and every sandbox run in one
 *     v1 memory cgroup made for the side, and its `memory.max_usage_in_bytes`
 *     is the peak (page cache charged to them included). This is the figure
 *     judged. MemTotal − MemAvailable, sampled at 10 Hz, is reported too,
 *     but it is no measure of reclaim: MemAvailable counts clean page cache
 *     as available, and it moves with everything else on this shared machine;
 *   - the time until every task finished;
 *   - page-cache misses that reached layerd: chunk reads the FUSE mounts
 *     asked of the chunk cache (every sandbox reads the same bytes, so more
 *     of these is fewer page-cache hits), and the reclaimer's passes.
 * The "on" side runs layerd with `--memory-target SIZE` (the bench's
 * --target; layerd's own default is half the limit where it is charged,
 * which an unlimited cgroup on this 24 GB machine never reaches), the
 * "off" side with `--memory-target off`. Sides alternate by rep.
 *
 * Needs root (cgroups, FUSE). Bench-only: may import anything.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs'
import { mkdir, mkdtemp, readdir, rm, rmdir } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { awaitDaemonReady } from '../fixtures/layerd-harness.js'
import { parseRef } from '../src/format/ref.js'
import { pushImage } from '../src/image/push.js'
import { openMemoryNodeDb } from '../src/state/node-db.js'
import { openStore } from '../src/store/open-store.js'
import { nativeMemory } from '../src/native.js'
import { createSandbox } from '../src/sandbox/create-sandbox.js'
import { ControlClient } from '../src/daemon/client/control-client.js'
import { socketPath, type DaemonMemoryResult } from '../src/daemon/client/control-protocol.js'
import { DAEMON_ENTRY, DAEMON_NODE_FLAGS } from '../src/daemon/client/daemon-launcher.js'
import { fmt, markdownTable, MB, REPORT_OPTIONS, shq, startLoadSampler, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const SPEC = {
  sandboxes: { type: 'string', default: '16', value: 'N' },
  concurrency: { type: 'string', default: '4', value: 'C' },
  'hold-ms': { type: 'string', default: '2000', value: 'MS' },
  target: { type: 'string', default: '128M', value: 'SIZE' },
  reps: { type: 'string', default: '1', value: 'R' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('node-memory', SPEC)
const SANDBOXES = ARGS.number('sandboxes', { min: 1 })
const CONCURRENCY = ARGS.number('concurrency', { min: 1 })
const HOLD_MS = ARGS.number('hold-ms')
const TARGET = ARGS.string('target')
const REPS = ARGS.number('reps', { min: 1 })
const IMAGE = 'deb/python:v1'
const MEMCG = '/sys/fs/cgroup/memory'
/** The cgroup's use is read every 20 ms: at 100 ms its highest sample was up to 26 MB under max_usage_in_bytes, so the breakdown missed the peak. MemTotal − MemAvailable is read every 5th (10 Hz). */
const SAMPLE_MS = 20
const MEMINFO_EVERY = 5

type Side = 'on' | 'off'

/**
 * The side's cgroup at its highest 50 Hz sample. v1 charges a page to the
 * group of the task that first faulted it: the `daemon*` fields are the
 * side's own group (layerd: its heap, lmdb's pages, the store's), the
 * `sandbox*` fields its child groups (the sandboxes: the FUSE files' page
 * cache, their processes' anonymous memory).
 */
interface PeakBreakdown {
  usage: number
  cache: number
  rss: number
  /** Kernel memory charged to the side (memory.kmem.usage_in_bytes: dentries, inodes, page tables; v1 counts it in usage). */
  kmem: number
  mappedFile: number
  daemonCache: number
  daemonRss: number
  sandboxCache: number
  sandboxRss: number
}

interface SideResult {
  side: Side
  rep: number
  peakCgroupBytes: number
  peakNodeUsedBytes: number
  nodeUsedAtStartBytes: number
  totalMs: number
  failedTasks: number
  /** drop_caches writes on the node during the side (by anything: other users of the machine): a side with any is disturbed. */
  dropCaches: number
  chunkReads: number
  chunkHits: number
  chunkMisses: number
  reclaimPasses: number
  /** Full GCs the reclaimer ran because layerd's anonymous memory grew while over the target. */
  collections: number
  /** Settles the reclaimer ran as a burst of chunk reads ended (with the lmdb pages it wrote flushed and dropped). */
  burstEnds: number
  filesDropped: number
  /** layerd's own page-cache copies dropped (src/daemon/memory/page-copies.ts): the store's bytes, and flush-and-drops of the chunk cache file. */
  storeBytesDropped: number
  cacheFileDrops: number
  daemonPeakRssBytes: number
  /** The cgroup's memory.stat at the highest 50 Hz sample: where the peak is. */
  atPeak: PeakBreakdown
  /** The cgroup's use once every task finished, and the chunk cache file's pages then in the page cache (fincore). */
  cgroupAtEndBytes: number
  cacheFileResidentBytes: number
  /** Once a second: where the side's memory is (MB), to see what the peak is made of. */
  timeline: Array<{ s: number, usage: number, daemonCache: number, sandboxCache: number, daemonRss: number, sandboxRss: number, mdb: number, store: number, hits: number, misses: number, daemon: DaemonView }>
}

/** layerd's own view of its memory at a timeline tick (MB): V8's ArrayBuffers and heap, glibc's bytes in use and free in its arenas, RssAnon. */
interface DaemonView { rssAnon: number, arrayBuffers: number, heapUsed: number, mallocInUse: number, mallocFree: number, mallocMmap: number }

function daemonView (m: DaemonMemoryResult | undefined): DaemonView {
  return {
    rssAnon: (m?.rssAnonBytes ?? NaN) / MB,
    arrayBuffers: (m?.v8.arrayBufferBytes ?? NaN) / MB,
    heapUsed: (m?.v8.heapUsedBytes ?? NaN) / MB,
    mallocInUse: (m?.malloc?.inUseBytes ?? NaN) / MB,
    mallocFree: (m?.malloc?.freeBytes ?? NaN) / MB,
    mallocMmap: (m?.malloc?.mmapBytes ?? NaN) / MB
  }
}

/** Bytes of `files` in the page cache (fincore); 0 for none. */
function residentBytes (files: string[]): number {
  if (files.length === 0) return 0
  const out = execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', ...files], { encoding: 'utf8' })
  return out.split('\n').filter(l => l.trim() !== '').reduce((a, l) => a + Number(l.trim()), 0)
}

/** /proc/vmstat's count of `echo N > /proc/sys/vm/drop_caches` so far (page cache and slab): another process dropping the node's caches mid-side disturbs its peak and its misses. */
function dropCachesCount (): number {
  const text = readFileSync('/proc/vmstat', 'utf8')
  return ['drop_pagecache', 'drop_slab'].reduce((n, f) => n + Number(new RegExp(`^${f} (\\d+)`, 'm').exec(text)?.[1] ?? 0), 0)
}

function meminfoUsed (): number {
  const text = readFileSync('/proc/meminfo', 'utf8')
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024
  return field('MemTotal') - field('MemAvailable')
}

/** Drop the clean page cache of every file under `dir` (POSIX_FADV_DONTNEED), so a side starts without the last one's pages. */
async function dropPageCache (dir: string): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!e.isFile()) continue
    const fd = openSync(join(e.parentPath, e.name), 'r')
    try { nativeMemory().fadviseDontNeed(fd, 0, 0) } finally { closeSync(fd) }
  }
}

async function startDaemon (home: string, cgroupDir: string, env: NodeJS.ProcessEnv, side: Side): Promise<ChildProcess> {
  const daemon = [process.execPath, ...DAEMON_NODE_FLAGS, DAEMON_ENTRY, '--foreground', '--home', home, '--memory-target', side === 'on' ? TARGET : 'off']
  // The daemon joins the side's cgroup before it execs, so all it charges (its heap, lmdb's pages, the store's) counts.
  const child = spawn('/bin/sh', ['-c', `echo $$ > ${shq(join(cgroupDir, 'cgroup.procs'))} && exec ${daemon.map(shq).join(' ')}`], { env, stdio: ['ignore', 'ignore', 'pipe'] })
  return await awaitDaemonReady(child, home, 30_000)
}

async function stopDaemon (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  child.kill('SIGTERM')
  await exited
}

const WORKING_SET = 'find /usr -type f -exec cat {} + > /dev/null && /usr/bin/python3 -c "import json, sqlite3, ssl, email.message, http.client, asyncio, decimal, xml.dom.minidom"'

async function runSide (work: string, storeDir: string, storeUrl: string, side: Side, rep: number): Promise<SideResult> {
  const name = `layerd-nodemem-${process.pid}-${side}-${rep}`
  const cgroupDir = join(MEMCG, name)
  await mkdir(cgroupDir)
  const home = join(work, `home-${side}-${rep}`)
  await mkdir(home)
  await dropPageCache(storeDir)
  const env = { ...process.env, LAYERD_HOME: home, LAYERD_STORE: storeUrl }
  const nodeUsedAtStartBytes = meminfoUsed()
  let peakNodeUsedBytes = nodeUsedAtStartBytes
  let sampledPeak: PeakBreakdown = { usage: 0, cache: 0, rss: 0, kmem: 0, mappedFile: 0, daemonCache: 0, daemonRss: 0, sandboxCache: 0, sandboxRss: 0 }
  let ticks = 0
  const sampler = setInterval(() => {
    if (ticks++ % MEMINFO_EVERY === 0) peakNodeUsedBytes = Math.max(peakNodeUsedBytes, meminfoUsed())
    const usage = Number(readFileSync(join(cgroupDir, 'memory.usage_in_bytes'), 'utf8'))
    if (usage > sampledPeak.usage) {
      const stat = readFileSync(join(cgroupDir, 'memory.stat'), 'utf8')
      const field = (n: string): number => Number(new RegExp(`^${n} (\\d+)`, 'm').exec(stat)?.[1] ?? NaN)
      const cache = field('total_cache')
      const rss = field('total_rss')
      sampledPeak = {
        usage,
        cache,
        rss,
        kmem: Number(readFileSync(join(cgroupDir, 'memory.kmem.usage_in_bytes'), 'utf8')),
        mappedFile: field('total_mapped_file'),
        daemonCache: field('cache'),
        daemonRss: field('rss'),
        sandboxCache: cache - field('cache'),
        sandboxRss: rss - field('rss')
      }
    }
  }, SAMPLE_MS)
  const storeFiles = (await readdir(storeDir, { withFileTypes: true, recursive: true })).filter(e => e.isFile()).map(e => join(e.parentPath, e.name))
  const timeline: SideResult['timeline'] = []
  const t0 = performance.now()
  let counts = { hits: 0, misses: 0 }
  let daemon = daemonView(undefined)
  let statsClient: ControlClient | undefined
  const timelineTimer = setInterval(() => {
    statsClient?.call('stats', {}).then(s => {
      const { cache: c, memory } = s as { cache: { hits: number, misses: number }, memory: DaemonMemoryResult }
      counts = { hits: c.hits, misses: c.misses }
      daemon = daemonView(memory)
    }, () => {})
    try {
      const stat = readFileSync(join(cgroupDir, 'memory.stat'), 'utf8')
      const field = (n: string): number => Number(new RegExp(`^${n} (\\d+)`, 'm').exec(stat)?.[1] ?? NaN) / MB
      const mdbPath = join(home, 'cache', 'data.mdb')
      timeline.push({
        s: Math.round((performance.now() - t0) / 100) / 10,
        usage: Number(readFileSync(join(cgroupDir, 'memory.usage_in_bytes'), 'utf8')) / MB,
        daemonCache: field('cache'),
        sandboxCache: field('total_cache') - field('cache'),
        daemonRss: field('rss'),
        sandboxRss: field('total_rss') - field('rss'),
        mdb: existsSync(mdbPath) ? residentBytes([mdbPath]) / MB : 0,
        store: residentBytes(storeFiles) / MB,
        ...counts,
        daemon
      })
    } catch {}
  }, 1000)
  const child = await startDaemon(home, cgroupDir, env, side)
  const client = await ControlClient.connect(socketPath(home))
  statsClient = client
  let failedTasks = 0
  const dropsAtStart = dropCachesCount()
  const started = performance.now()
  try {
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < SANDBOXES) {
        next++
        const sb = await createSandbox({ image: IMAGE, tier: 'process', home, store: storeUrl, cgroupParent: name })
        try {
          const r = await sb.exec({ cmd: ['/bin/sh', '-c', `${WORKING_SET} && sleep ${HOLD_MS / 1000}`], timeoutMs: 300_000 })
          if (r.exitCode !== 0) { failedTasks++; process.stderr.write(`  task failed (${r.exitCode}): ${r.stderr.toString().slice(-300)}\n`) }
        } finally {
          await sb.destroy()
        }
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker))
    const totalMs = performance.now() - started
    clearInterval(sampler)
    clearInterval(timelineTimer)
    const stats = await client.call('stats', {}) as { cache: { hits: number, misses: number }, memory: DaemonMemoryResult }
    const cgroupNowBytes = Number(readFileSync(join(cgroupDir, 'memory.usage_in_bytes'), 'utf8'))
    const cacheFileResidentBytes = Number(execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', join(home, 'cache', 'data.mdb')], { encoding: 'utf8' }).trim())
    const peakCgroupBytes = Number(readFileSync(join(cgroupDir, 'memory.max_usage_in_bytes'), 'utf8'))
    const r: SideResult = {
      side,
      rep,
      peakCgroupBytes,
      peakNodeUsedBytes,
      nodeUsedAtStartBytes,
      totalMs,
      failedTasks,
      dropCaches: dropCachesCount() - dropsAtStart,
      chunkReads: stats.cache.hits + stats.cache.misses,
      chunkHits: stats.cache.hits,
      chunkMisses: stats.cache.misses,
      reclaimPasses: stats.memory.reclaim?.passes ?? 0,
      collections: stats.memory.reclaim?.collections ?? 0,
      burstEnds: stats.memory.reclaim?.burstEnds ?? 0,
      filesDropped: stats.memory.reclaim?.filesDropped ?? 0,
      storeBytesDropped: stats.memory.reclaim?.storeBytesDropped ?? 0,
      cacheFileDrops: stats.memory.reclaim?.cacheFileDrops ?? 0,
      daemonPeakRssBytes: stats.memory.peakRssBytes,
      atPeak: sampledPeak,
      cgroupAtEndBytes: cgroupNowBytes,
      cacheFileResidentBytes,
      timeline
    }
    process.stderr.write(`  rep ${rep + 1} reclaim ${side}: peak ${fmt(peakCgroupBytes / MB, 1)} MB (cgroup), node used peak +${fmt((peakNodeUsedBytes - nodeUsedAtStartBytes) / MB, 1)} MB, ${fmt(totalMs / 1000, 2)} s, ${r.chunkReads} chunk reads, ${r.reclaimPasses} passes${r.dropCaches > 0 ? `, DISTURBED: ${r.dropCaches} drop_caches on the node meanwhile` : ''}\n`)
    return r
  } finally {
    clearInterval(sampler)
    clearInterval(timelineTimer)
    client.close()
    await stopDaemon(child)
    await rm(home, { recursive: true, force: true })
    // The sandboxes' groups are gone with them; the side's group is empty now (its charges move to the parent).
    await rmdir(cgroupDir).catch(err => { process.stderr.write(`  cannot remove ${cgroupDir}: ${(err as Error).message}\n`) })
    await rmdir(join('/sys/fs/cgroup/pids', name)).catch(() => {})
  }
}

async function main (): Promise<void> {
  const load = startLoadSampler()
  const images = await ensureDebianImages()
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-nodemem-'))
  try {
    const storeDir = join(work, 'store')
    const storeUrl = `file://${storeDir}`
    const store = openStore(storeUrl)
    await pushImage(images.images['python-v1'].dockerArchive, parseRef(IMAGE), { store, db: openMemoryNodeDb() })
    await store.close()
    const results: SideResult[] = []
    for (let rep = 0; rep < REPS; rep++) {
      const order: Side[] = rep % 2 === 0 ? ['off', 'on'] : ['on', 'off']
      for (const side of order) results.push(await runSide(work, storeDir, storeUrl, side, rep))
    }
    const mean = (side: Side, f: (r: SideResult) => number): number => {
      const xs = results.filter(r => r.side === side).map(f)
      return xs.reduce((a, b) => a + b, 0) / xs.length
    }
    const row = (label: string, f: (r: SideResult) => number, digits: number, div = 1): string[] =>
      [label, fmt(mean('off', f) / div, digits), fmt(mean('on', f) / div, digits), `${fmt((mean('on', f) / mean('off', f) - 1) * 100, 1)}%`]
    const peakCut = 1 - mean('on', r => r.peakCgroupBytes) / mean('off', r => r.peakCgroupBytes)
    const slower = mean('on', r => r.totalMs) / mean('off', r => r.totalMs) - 1
    const markdown = [
      markdownTable(['', 'reclaim off', 'reclaim on', 'change'], [
        row('peak memory, workload cgroup (MB)', r => r.peakCgroupBytes, 1, MB),
        row('peak MemTotal − MemAvailable above the start (MB)', r => r.peakNodeUsedBytes - r.nodeUsedAtStartBytes, 1, MB),
        row('time until all tasks finished (s)', r => r.totalMs, 2, 1000),
        row('chunk reads by the mounts (page-cache misses reaching layerd)', r => r.chunkReads, 0),
        row('of them chunk-cache misses (fetched from the store)', r => r.chunkMisses, 0),
        row('workload cgroup once all tasks finished (MB)', r => r.cgroupAtEndBytes, 1, MB),
        row('chunk cache file (data.mdb) in the page cache then (MB)', r => r.cacheFileResidentBytes, 1, MB),
        row('reclaim passes', r => r.reclaimPasses, 0),
        row('collections (GCs on layerd\'s anonymous memory growth over the target)', r => r.collections, 0),
        row('settles as a burst of chunk reads ended', r => r.burstEnds, 0),
        row('image files whose page cache was dropped', r => r.filesDropped, 0),
        row('store reads\' pages dropped (MB)', r => r.storeBytesDropped, 1, MB),
        row('chunk cache file flushed and dropped after commits (times)', r => r.cacheFileDrops, 0),
        row('at the highest 50 Hz sample: page cache (MB)', r => r.atPeak.cache, 1, MB),
        row('at the highest 50 Hz sample: anonymous (MB)', r => r.atPeak.rss, 1, MB),
        row('at the highest 50 Hz sample: kernel memory (dentries, inodes, page tables) (MB)', r => r.atPeak.kmem, 1, MB),
        row('… page cache charged to layerd (lmdb, store) (MB)', r => r.atPeak.daemonCache, 1, MB),
        row('… page cache charged to the sandboxes (FUSE files) (MB)', r => r.atPeak.sandboxCache, 1, MB),
        row('… layerd\'s anonymous memory (MB)', r => r.atPeak.daemonRss, 1, MB),
        row('… the sandboxes\' anonymous memory (MB)', r => r.atPeak.sandboxRss, 1, MB),
        row('layerd VmHWM (MB)', r => r.daemonPeakRssBytes, 1, MB),
        row('failed tasks', r => r.failedTasks, 0),
        row('drop_caches on the node by others during the side (times; any disturbs the side)', r => r.dropCaches, 1)
      ]),
      '',
      `Peak ${peakCut >= 0.4 ? '✓' : '✗'} ${fmt(peakCut * 100, 1)}% lower with reclaim on (target ≥ 40%); total time ${slower <= 0.05 ? '✓' : '✗'} ${fmt(slower * 100, 1)}% ${slower >= 0 ? 'slower' : 'faster'} (target ≤ 5% slower).`,
      '',
      `${SANDBOXES} process sandboxes of ${IMAGE}, ${CONCURRENCY} at a time, each reading every file under /usr and importing python modules, then holding ${HOLD_MS} ms; ${REPS} rep(s), sides alternating. ` +
      `"reclaim on" is \`--memory-target ${TARGET}\`. Peak memory is the side's v1 memory cgroup's max_usage_in_bytes (layerd and every sandbox in it, page cache included).`
    ].join('\n')
    const command = `node dist/bench/node-memory.js --sandboxes ${SANDBOXES} --concurrency ${CONCURRENCY} --hold-ms ${HOLD_MS} --target ${TARGET} --reps ${REPS}`
    await writeReport({ name: 'node-memory', title: 'Node memory with layerd\'s proactive reclaim on and off', command, load: load.stop(), markdown, data: { sandboxes: SANDBOXES, concurrency: CONCURRENCY, holdMs: HOLD_MS, target: TARGET, results, peakCut, slower } }, ARGS.string('out'))
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}

await main()
process.exit(0)
