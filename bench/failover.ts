/**
 * bench/failover.ts: the stall a reader sees when layerd dies (SIGKILL; the
 * holder starts a new one, which takes the FUSE connections over) and when
 * it is restarted on purpose (`layerctl daemon restart`: the new one loads
 * while the old one serves, then takes over). Issue 19's targets: max
 * ≤ 2 s per crash, ≤ 0.5 s per planned restart.
 *
 * One node (fixtures' copy of the python image store, layerd under its
 * holder), one plain mount; 4 probe readers (python, on the host) read small
 * files of the image in a loop with their page cache dropped before each
 * read, so every read reaches the daemon, and record every read slower than
 * 10 ms. The stall of an event is the longest read that was under way
 * between the event and the moment the new daemon answered its control
 * socket (started before that moment, ended after the event); when no slow
 * read overlaps that window it counts 10 ms. 20 kills, then 20
 * restarts, each once the new daemon serves and reads have gone on for 1 s.
 *
 * It also reports where a new daemon's start went (the "start phases" lines
 * layerd logs: ms since its process began at each phase's end), and the
 * resident memory of the serving daemon and of the holder's warm standby
 * (LAYERD_WARM_STANDBY=0 runs without one). The node's layerd.log is kept
 * as /tmp/layerd-failover.log.
 *
 *   node dist/bench/failover.js [--kills 20] [--restarts 20]
 *
 * Bench-only: may import anything.
 */
import { spawn } from 'node:child_process'
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { copyPushedStore } from '../src/attacks/attack-harness.js'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { layerdNode } from '../fixtures/layerd-harness.js'
import { servingPid } from '../fixtures/takeover-workload.js'
import { VERIFYING_READER_PY, expectedFiles, lastReport, type ReaderReport } from '../fixtures/verifying-readers.js'

const PROBES = 4
const SLOW_S = 0.01
const READ_THROUGH_MS = 1_000
/** Told to stop, a probe ends within one read; this long means a read hangs. */
const PROBES_END_MS = 60_000

const { values } = parseArgs({ options: { kills: { type: 'string', default: '20' }, restarts: { type: 'string', default: '20' } } })
const kills = Number(values.kills)
const restarts = Number(values.restarts)

function percentile (xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? NaN
}

const dir = await mkdtemp('/tmp/layerd-failover-')
/** Set when reads hang: the node is then left as it is (removing it would hang on the mount too). */
let readsHung = false
try {
  const images = await ensureDebianImages()
  const storeDir = join(dir, 'store')
  await copyPushedStore(storeDir)
  const node = layerdNode(join(dir, 'home'), { store: `file://${storeDir}` })
  const mnt = join(node.home, 'mnt')
  const m = await node.layerctl('mount', 'deb/python:v1', mnt)
  if (m.code !== 0) throw new Error(`mount: ${m.stderr}`)
  // Small files (≤ 64 KiB), so a read is one request and its time is the daemon's answer time.
  const small = (await expectedFiles(images.images['python-v1'].rootfs)).filter(f => f.size > 0 && f.size <= 65536)
  const stopFile = join(dir, 'stop')
  const probes = Array.from({ length: PROBES }, (_, i) => new Promise<ReaderReport>((resolve, reject) => {
    const files = small.filter((_, k) => k % PROBES === i).slice(0, 400).map(f => [f.path, f.sha256])
    const child = spawn('python3', ['-c', VERIFYING_READER_PY], { stdio: ['pipe', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (c: Buffer) => { out = (out + c.toString()).slice(-4_000_000) })
    child.on('close', () => { const r = lastReport(out); if (r === undefined) reject(new Error('probe reported nothing')); else resolve(r) })
    child.stdin.end(JSON.stringify({ root: mnt, files, until: Date.now() / 1000 + 3600, stopFile, slowS: SLOW_S, pauseS: 0.002 }))
  }))
  let pid = await servingPid(node.home, undefined)
  const rss = (p: number | null | undefined): Promise<number | undefined> => p === null || p === undefined
    ? Promise.resolve(undefined)
    : readFile(`/proc/${p}/status`, 'utf8').then(t => Number(/VmRSS:\s+(\d+)/.exec(t)?.[1]) / 1024, () => undefined)
  let memory = ''
  for (let tries = 0; tries < 100 && memory === ''; tries++) {
    await new Promise(resolve => setTimeout(resolve, 100))
    const st = await node.layerctl('daemon', 'status', '--json')
    const holder = (JSON.parse(st.stdout) as { holder: { daemonPid: number, standbyPid: number | null } | null }).holder
    if (holder?.standbyPid === null && process.env.LAYERD_WARM_STANDBY !== '0') continue
    if (tries < 30 && holder?.standbyPid !== null) continue // let the standby finish loading
    const [serving, standby] = await Promise.all([rss(holder?.daemonPid), rss(holder?.standbyPid)])
    memory = `RSS: serving layerd ${serving?.toFixed(1) ?? '?'} MiB, warm standby ${standby === undefined ? 'none' : `${standby.toFixed(1)} MiB`}`
  }
  const events: Array<{ kind: 'crash' | 'restart', at: number, servedAt: number }> = []
  for (let i = 0; i < kills + restarts; i++) {
    await new Promise(resolve => setTimeout(resolve, READ_THROUGH_MS))
    const kind = i < kills ? 'crash' : 'restart'
    const at = Date.now() / 1000
    if (kind === 'crash') await node.killDaemon()
    else {
      const r = await node.layerctl('daemon', 'restart')
      if (r.code !== 0) throw new Error(`restart: ${r.stderr}`)
    }
    pid = await servingPid(node.home, pid)
    events.push({ kind, at, servedAt: Date.now() / 1000 })
  }
  await new Promise(resolve => setTimeout(resolve, READ_THROUGH_MS))
  await writeFile(stopFile, '')
  // A read that never ends is the worst failover outcome: say so instead of waiting for ever.
  let hung: NodeJS.Timeout | undefined
  const reports = await Promise.race([
    Promise.all(probes),
    new Promise<never>((_resolve, reject) => {
      hung = setTimeout(() => {
        readsHung = true
        const message = `the probe readers did not finish within ${PROBES_END_MS / 1000} s of being told to stop: reads hang (requests waiting: /sys/fs/fuse/connections/*/waiting; layerd.log in ${node.home}, left in place)`
        console.error(message)
        reject(new Error(message))
      }, PROBES_END_MS)
    })
  ]).finally(() => clearTimeout(hung))
  await node.stopDaemon()
  await copyFile(join(node.home, 'layerd.log'), '/tmp/layerd-failover.log').catch(() => {})
  // "start phases (ms since the process began): modules N, [takeover N,] lock N, open N, recover N, sweep N, listen N"
  const phaseLines = (await readFile('/tmp/layerd-failover.log', 'utf8').catch(() => '')).split('\n').filter(l => l.includes('start phases'))
  const phaseMs: Record<string, number[]> = {}
  for (const line of phaseLines.slice(1)) { // the first is the node's first start, not a takeover
    let prev: number | undefined
    for (const m of line.matchAll(/(\w+) (\d+)/g)) {
      const at = Number(m[2])
      ;(phaseMs[m[1]!] ??= []).push(prev === undefined ? at : at - prev)
      prev = at
    }
  }
  const errors = reports.flatMap(r => r.errors)
  const wrong = reports.flatMap(r => r.wrong)
  const slow = reports.flatMap(r => r.slow)
  const stall = (e: { at: number, servedAt: number }): number => Math.max(SLOW_S, ...slow.filter(([end, s]) => end - s <= e.servedAt && end >= e.at).map(([, s]) => s))
  // The same measure over a quiet stretch (the second of reads before each event, its edges left out): what the machine's load alone costs a read.
  const quiet = events.map(e => stall({ at: e.at - READ_THROUGH_MS / 1000 + 0.1, servedAt: e.at - 0.05 }))
  const rows: string[] = []
  const summary: Record<string, { n: number, p50: number, p99: number, max: number }> = {}
  const rowOf = (label: string, xs: number[], target?: number): string => {
    const max = Math.max(...xs)
    return `| ${label} | ${xs.length} | ${percentile(xs, 50).toFixed(2)} | ${percentile(xs, 99).toFixed(2)} | ${max.toFixed(2)} | ${target === undefined ? '' : `≤ ${target} s ${max <= target ? '✓' : '✗'}`} |`
  }
  for (const kind of ['crash', 'restart'] as const) {
    const stalls = events.filter(e => e.kind === kind).map(e => stall(e))
    if (stalls.length === 0) continue
    summary[kind] = { n: stalls.length, p50: percentile(stalls, 50), p99: percentile(stalls, 99), max: Math.max(...stalls) }
    rows.push(rowOf(kind === 'crash' ? 'SIGKILL (holder restarts layerd)' : '`layerctl daemon restart`', stalls, kind === 'crash' ? 2 : 0.5))
  }
  rows.push(rowOf('no event (the quiet second before each)', quiet))
  summary.quiet = { n: quiet.length, p50: percentile(quiet, 50), p99: percentile(quiet, 99), max: Math.max(...quiet) }
  // Unserved windows from the log: the old daemon gone (the holder's exit line) to the new one's connections attached ("recovered …").
  const logLines = (await readFile('/tmp/layerd-failover.log', 'utf8').catch(() => '')).split('\n')
  const unserved: Record<'crash' | 'restart', number[]> = { crash: [], restart: [] }
  let gone: { kind: 'crash' | 'restart', at: number } | undefined
  for (const line of logLines) {
    const at = Date.parse(line.slice(0, 24))
    if (/holder: layerd \d+ (was killed by SIGKILL|exited with code 6)/.test(line)) gone = { kind: line.includes('SIGKILL') ? 'crash' : 'restart', at }
    else if (gone !== undefined && line.includes(' recovered ')) { unserved[gone.kind].push(at - gone.at); gone = undefined }
  }
  console.log(`reads: ${reports.reduce((n, r) => n + r.reads, 0)}, errors: ${errors.length}, wrong bytes: ${wrong.length}${errors.length > 0 ? `\n${errors.slice(0, 5).join('\n')}` : ''}`)
  console.log('| event | n | p50 s | p99 s | max s | target |\n|---|--:|--:|--:|--:|---|\n' + rows.join('\n'))
  console.log(`connections unserved (the old layerd gone to the new one's attached, from layerd.log), ms p50 / max: ` +
    (['crash', 'restart'] as const).filter(k => unserved[k].length > 0).map(k => `${k} ${percentile(unserved[k], 50)} / ${Math.max(...unserved[k])} (n ${unserved[k].length})`).join(', '))
  console.log(memory)
  console.log(`start phases over ${Math.max(0, phaseLines.length - 1)} takeovers, ms (p50 / max; modules: ms since the process began; takeover: the warm standby's wait; the rest: each phase's own time): ` +
    Object.entries(phaseMs).map(([k, v]) => `${k} ${percentile(v, 50)} / ${Math.max(...v)}`).join(', '))
  console.log(JSON.stringify(summary))
  // Per event, in order: what to look up in the log when a tail is high.
  console.log(`per event (kind, s after the start, stall s): ${events.map(e => `${e.kind} ${(e.at - (events[0]?.at ?? e.at)).toFixed(1)} ${stall(e).toFixed(2)}`).join('; ')}`)
  console.log(`reproduce: node dist/bench/failover.js --kills ${kills} --restarts ${restarts}`)
} finally {
  if (!readsHung) await rm(dir, { recursive: true, force: true }).catch(() => {})
}
