/**
 * The metrics address setting (`--metrics-addr HOST:PORT`), checked without
 * loading prom-client: layerd/main.ts checks it at start, and the daemon
 * loads the metrics server (daemon-metrics.ts) only when it is set.
 *
 * May import: errors.
 */
import { UsageError } from '../errors.js'

/** Parse `HOST:PORT` (IPv6 as `[::1]:9464`). Throws UsageError naming the value. */
export function parseMetricsAddr (addr: string): { host: string, port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(addr.trim())
  const port = m === null ? NaN : Number(m[3])
  if (m === null || !(port >= 0 && port <= 65535)) throw new UsageError(`invalid metrics address ${JSON.stringify(addr)}: use HOST:PORT, e.g. 127.0.0.1:9464`)
  return { host: m[1] ?? m[2]!, port }
}

