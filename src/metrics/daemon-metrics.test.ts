/**
 * layerd's /metrics on a real daemon: scraped over HTTP, parsed with an npm
 * Prometheus text parser (parse-prometheus-text-format), the counters move
 * with reads on a real FUSE mount and agree with `layerctl stats --json`;
 * process metrics are there; `--log-format json` writes JSON lines.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { createServer } from 'node:net'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createRequire } from 'node:module'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { buildLayerTar, dir, largeFile } from '../../fixtures/layer-dsl.js'
import { DAEMON_ENTRY } from '../daemon/client/daemon-launcher.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'

const parsePrometheus = createRequire(import.meta.url)('parse-prometheus-text-format') as (text: string) => Array<{ name: string, type: string, metrics: Array<{ value?: string, labels?: Record<string, string>, buckets?: Record<string, string>, count?: string }> }>

async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer().listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => resolve(port))
    }).once('error', reject)
  })
}

t.test('/metrics: prom-client exposition, counters move with reads and agree with stats; JSON logs', async t => {
  const work = t.testdir()
  const home = await mkdtemp('/tmp/layerd-metrics-')
  const storeUrl = `file://${join(work, 'store')}`
  const store = openStore(storeUrl)
  const tar = join(work, 'img.tar')
  await writeFile(tar, buildLayerTar([dir('d'), ...Array.from({ length: 12 }, (_, i) => largeFile(`d/f${i}.bin`, 100_000 + i, `m-${i}`))]))
  await pushImage(tar, parseRef('metrics/img:v1'), { store, db: openMemoryNodeDb() })
  await store.close()

  const port = await freePort()
  const node = layerdNode(home, { store: storeUrl })
  const daemon = spawn(process.execPath, [DAEMON_ENTRY, '--foreground', '--home', home, '--metrics-addr', `127.0.0.1:${port}`, '--log-format', 'json'],
    { env: node.env, stdio: ['ignore', 'ignore', 'pipe'] })
  let log = ''
  daemon.stderr.on('data', (c: Buffer) => { log += c.toString() })
  const mnt = join(work, 'mnt')
  await mkdir(mnt)
  let stopped = false
  const stopAll = async (): Promise<void> => {
    if (stopped) return // a second umount would start a new daemon for this home
    stopped = true
    await node.layerctl('umount', mnt)
    if (daemon.exitCode === null && daemon.signalCode === null) {
      const exited = new Promise(resolve => daemon.once('exit', resolve))
      daemon.kill('SIGTERM')
      const timer = setTimeout(() => daemon.kill('SIGKILL'), 30_000)
      await exited
      clearTimeout(timer)
    }
    await rm(home, { recursive: true, force: true })
  }
  t.teardown(stopAll)
  const scrape = async (): Promise<Map<string, ReturnType<typeof parsePrometheus>[number]>> => {
    const res = await fetch(`http://127.0.0.1:${port}/metrics`)
    t.equal(res.status, 200)
    return new Map(parsePrometheus(await res.text()).map(f => [f.name, f]))
  }
  const value = (families: Map<string, any>, name: string, labels: Record<string, string> = {}): number => {
    const f = families.get(name)
    if (f === undefined) throw new Error(`metric ${name} missing`)
    const m = f.metrics.find((x: any) => Object.entries(labels).every(([k, v]) => x.labels?.[k] === v))
    return Number(m?.value ?? m?.count ?? NaN)
  }
  for (let i = 0; i < 200 && !log.includes('metrics on http'); i++) await new Promise(resolve => setTimeout(resolve, 100))
  t.match(log, /metrics on http:\/\/127\.0\.0\.1:\d+\/metrics/)

  const m = await node.layerctl('mount', 'metrics/img:v1', mnt)
  t.equal(m.code, 0, m.stderr)
  const before = await scrape()
  t.equal(value(before, 'layerd_mounts'), 1, 'layerd_mounts counts the mount')
  for (const name of ['process_resident_memory_bytes', 'process_cpu_seconds_total', 'process_open_fds']) t.ok(value(before, name) > 0, `${name} is exported`)
  t.equal(before.get('layerd_fuse_read_duration_seconds')?.type, 'HISTOGRAM')
  t.equal(before.get('layerd_cache_hits_total')?.type, 'COUNTER')

  for (let i = 0; i < 12; i++) await readFile(join(mnt, 'd', `f${i}.bin`))
  const after = await scrape()
  const stats = JSON.parse((await node.layerctl('stats', '--json')).stdout)
  t.ok(value(after, 'layerd_fuse_requests_total', { op: 'read' }) >= value(before, 'layerd_fuse_requests_total', { op: 'read' }) + 12, 'FUSE reads counted')
  t.ok(value(after, 'layerd_fuse_read_duration_seconds') >= 12, 'every read observed in the histogram')
  t.ok(value(after, 'layerd_cache_misses_total') > value(before, 'layerd_cache_misses_total'), 'cold reads are cache misses')
  t.ok(value(after, 'layerd_store_fetched_bytes_total') > value(before, 'layerd_store_fetched_bytes_total'), 'bytes were fetched')
  t.ok(value(after, 'layerd_store_requests_total', { op: 'getRange', result: 'ok' }) > 0, 'range GETs counted by op and result')
  // Nothing reads between this scrape and stats: the figures are the same ones.
  t.equal(value(after, 'layerd_store_fetched_bytes_total'), stats.fetch.fetchedBytes, 'fetched bytes agree with stats')
  t.equal(value(after, 'layerd_cache_misses_total'), stats.cache.misses, 'misses agree with stats')
  t.equal(value(after, 'layerd_cache_hits_total'), stats.cache.hits, 'hits agree with stats')
  t.equal(value(after, 'layerd_cache_bytes'), stats.cache.bytes, 'cache bytes agree with stats')
  t.equal(value(after, 'layerd_corrupt_chunks_total'), stats.fetch.corruptChunks)
  t.equal(value(after, 'layerd_mounts'), stats.mounts)

  const lines = log.trim().split('\n')
  t.ok(lines.length >= 2)
  for (const line of lines) {
    const doc = JSON.parse(line)
    t.match(doc, { time: String, level: /^(debug|info|warn|error)$/, msg: String }, 'a JSON log line: time, level, msg')
  }
  await stopAll() // before tap removes the test's directory, which holds the mountpoint
})

t.test('layerd refuses a bad --metrics-addr and --log-format with exit code 2', async t => {
  const run = async (...args: string[]): Promise<{ code: number | null, stderr: string }> => await new Promise(resolve => {
    const p = spawn(process.execPath, [DAEMON_ENTRY, '--foreground', '--home', '/nonexistent-layerd-home', ...args], { stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    p.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
    p.once('exit', code => resolve({ code, stderr }))
  })
  const a = await run('--metrics-addr', 'localhost')
  t.equal(a.code, 2)
  t.match(a.stderr, /invalid metrics address "localhost": use HOST:PORT/)
  const b = await run('--log-format', 'xml')
  t.equal(b.code, 2)
  t.match(b.stderr, /invalid --log-format "xml": use text or json/)
})
