/**
 * The daemon's Prometheus metrics (prom-client), served in the text
 * exposition format on `--metrics-addr HOST:PORT` (off unless set).
 *
 * Nothing here sits on a hot path: every value is read at scrape time, from
 * the same sources `layerctl stats --json` reads (the cache's and fetchers'
 * counters, the mount list, the sandbox table) and from the plain counters
 * of counters.ts, so a scrape and `stats` agree. Names follow Prometheus
 * conventions: base units (bytes, seconds), `_total` on counters.
 *
 * May import: errors, format (the metrics layer), prom-client, node:http.
 */
import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { parseMetricsAddr } from './metrics-addr.js'
import { fuseReads, sandboxCreates, SANDBOX_CREATE_BUCKETS, storeRequests, STORE_OPS, STORE_RESULTS, type PlainHistogram } from './counters.js'
import type { LogLine } from '../log-line.js'

/** What the daemon gives the registry to read at scrape time. */
export interface MetricSources {
  /** The node-wide figures of `stats` (no mountpoint). */
  nodeStats: () => {
    cache: { bytes: number, hits: number, misses: number, evictions: number, capBytes: number | null }
    fetch: { fetchedBytes: number, fetches: number, corruptChunks: number, storeErrors: number }
    mounts: number
  }
  /** Sandboxes recorded on the node, by tier and state. */
  sandboxes: () => Array<{ tier: string, state: string }>
}

/** A counter whose value is read at scrape time (prom-client counters only go up through inc()). */
function scrapedCounter (registry: Registry, name: string, help: string, read: () => number): void {
  const c: Counter = new Counter({
    name, help, registers: [registry],
    collect () { c.reset(); c.inc(read()) }
  })
}

function scrapedGauge (registry: Registry, name: string, help: string, read: () => number): void {
  const g: Gauge = new Gauge({ name, help, registers: [registry], collect () { g.set(read()) } })
}

/** A prom-client histogram whose series are PlainHistograms (one per label set), copied at scrape time. */
class PlainBackedHistogram extends Histogram {
  readonly #series: () => Array<{ labels: Record<string, string>, hist: PlainHistogram }>
  readonly #name: string
  readonly #help: string
  constructor (registry: Registry, name: string, help: string, buckets: readonly number[], series: () => Array<{ labels: Record<string, string>, hist: PlainHistogram }>, labelNames: string[] = []) {
    super({ name, help, buckets: [...buckets], labelNames, registers: [registry] })
    this.#series = series
    this.#name = name
    this.#help = help
  }

  /** What the text exposition reads (prom-client's registry prefers it to get()). */
  async getForPromString (): Promise<any> {
    return await this.get()
  }

  override async get (): Promise<any> {
    const values: Array<{ labels: Record<string, string | number>, value: number, metricName: string }> = []
    for (const { labels, hist: p } of this.#series()) {
      let cumulative = 0
      p.bounds.forEach((le, i) => { cumulative += p.counts[i]!; values.push({ labels: { ...labels, le }, value: cumulative, metricName: `${this.#name}_bucket` }) })
      values.push({ labels: { ...labels, le: '+Inf' }, value: p.count, metricName: `${this.#name}_bucket` })
      values.push({ labels, value: p.sum, metricName: `${this.#name}_sum` })
      values.push({ labels, value: p.count, metricName: `${this.#name}_count` })
    }
    return { name: this.#name, help: this.#help, type: 'histogram', values, aggregator: 'sum' }
  }
}

/** Build the registry. Sync. */
export function createDaemonRegistry (sources: MetricSources): Registry {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: '' }) // process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds, nodejs_*
  // One read of the node's figures per scrape, shared by every metric below.
  let snapshot: ReturnType<MetricSources['nodeStats']> | undefined
  const node = (): ReturnType<MetricSources['nodeStats']> => (snapshot ??= sources.nodeStats())
  const render = registry.metrics.bind(registry)
  registry.metrics = async () => { snapshot = undefined; return await render() }
  scrapedCounter(registry, 'layerd_store_fetched_bytes_total', 'Compressed chunk bytes fetched from object stores (stats: fetch.fetchedBytes).', () => node().fetch.fetchedBytes)
  const requests: Counter<'op' | 'result'> = new Counter({
    name: 'layerd_store_requests_total',
    help: 'Object-store requests by operation and result (ok, not_found, error), as sent to the backend after retries are split out.',
    labelNames: ['op', 'result'],
    registers: [registry],
    collect () {
      requests.reset()
      for (const op of STORE_OPS) for (const result of STORE_RESULTS) requests.inc({ op, result }, storeRequests[op][result])
    }
  })
  scrapedCounter(registry, 'layerd_cache_hits_total', 'Chunk-cache hits (stats: cache.hits).', () => node().cache.hits)
  scrapedCounter(registry, 'layerd_cache_misses_total', 'Chunk-cache misses (stats: cache.misses).', () => node().cache.misses)
  scrapedCounter(registry, 'layerd_cache_evictions_total', 'Chunks evicted from the cache (stats: cache.evictions).', () => node().cache.evictions)
  scrapedGauge(registry, 'layerd_cache_bytes', 'Bytes held by the chunk cache (stats: cache.bytes).', () => node().cache.bytes)
  scrapedGauge(registry, 'layerd_cache_capacity_bytes', 'The chunk cache cap in bytes (-1 when uncapped).', () => node().cache.capBytes ?? -1)
  scrapedCounter(registry, 'layerd_corrupt_chunks_total', 'Chunks that failed verification and were never served (stats: fetch.corruptChunks).', () => node().fetch.corruptChunks)
  scrapedCounter(registry, 'layerd_store_fetches_total', 'Range GETs the fetchers issued (stats: fetch.fetches).', () => node().fetch.fetches)
  const fuse: Counter<'op'> = new Counter({
    name: 'layerd_fuse_requests_total',
    help: 'FUSE requests answered in JavaScript, by op (the kernel backend answers every op but read in C).',
    labelNames: ['op'],
    registers: [registry],
    collect () { fuse.reset(); fuse.inc({ op: 'read' }, fuseReads.requests) }
  })
  scrapedCounter(registry, 'layerd_fuse_read_bytes_total', 'Bytes returned by FUSE reads.', () => fuseReads.bytes)
  void new PlainBackedHistogram(registry, 'layerd_fuse_read_duration_seconds', 'Time from a FUSE read reaching JavaScript to its bytes being ready.',
    fuseReads.duration.bounds, () => [{ labels: {}, hist: fuseReads.duration }])
  void new PlainBackedHistogram(registry, 'layerd_sandbox_create_duration_seconds', 'Time to create a sandbox (until it can run commands), by tier, as its creator reports it (stats: sandboxCreates).',
    SANDBOX_CREATE_BUCKETS, () => [...sandboxCreates].map(([tier, hist]) => ({ labels: { tier }, hist })), ['tier'])
  scrapedGauge(registry, 'layerd_mounts', 'Image mounts served by this daemon (stats: mounts).', () => node().mounts)
  const sandboxes: Gauge<'tier' | 'state'> = new Gauge({
    name: 'layerd_sandboxes',
    help: 'Sandboxes recorded on this node, by tier and state (active, kept, orphaned).',
    labelNames: ['tier', 'state'],
    registers: [registry],
    collect () {
      sandboxes.reset()
      for (const s of sources.sandboxes()) sandboxes.inc({ tier: s.tier, state: s.state })
    }
  })
  return registry
}

export { parseMetricsAddr }

/** Serve GET /metrics on `addr`. Async; resolves once listening, with the bound port and a close(). */
export async function serveMetrics (registry: Registry, addr: string, log: LogLine): Promise<{ port: number, close: () => Promise<void> }> {
  const { host, port } = parseMetricsAddr(addr)
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('layerd serves only GET /metrics\n')
      return
    }
    registry.metrics().then(body => {
      res.writeHead(200, { 'content-type': registry.contentType }).end(body)
    }, (err: unknown) => {
      log(`metrics scrape failed: ${(err as Error).message}`, 'warn')
      res.writeHead(500, { 'content-type': 'text/plain' }).end('scrape failed\n')
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => { server.off('error', reject); resolve() })
  })
  const bound = server.address()
  const boundPort = typeof bound === 'object' && bound !== null ? bound.port : port
  log(`metrics on http://${host.includes(':') ? `[${host}]` : host}:${boundPort}/metrics`)
  return { port: boundPort, close: async () => { await new Promise<void>(resolve => server.close(() => resolve())) } }
}
