/**
 * The deploy benchmark's network model: the link arithmetic exactly, and
 * the proxy against real sockets (bandwidth, RTT, sharing, counting).
 */
import { createServer, connect, type Server, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { LinkDirection, describeLink, parseBandwidth } from './link-model.js'
import { ThrottleProxy } from './throttle-proxy.js'

async function listen (server: Server): Promise<number> {
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as { port: number }).port
}

/** A server that answers any connection with `size` bytes and closes. */
async function bulkServer (t: Test, size: number): Promise<number> {
  const server = createServer(s => { s.on('error', () => {}); s.end(Buffer.alloc(size, 7)) })
  t.teardown(() => { server.close() })
  return await listen(server)
}

/** Read everything from a new connection to the port; resolves with byte count and elapsed ms. */
async function download (port: number): Promise<{ bytes: number, ms: number }> {
  const t0 = performance.now()
  return await new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1')
    let bytes = 0
    s.on('data', (b: Buffer) => { bytes += b.length })
    s.on('error', reject)
    s.on('end', () => resolve({ bytes, ms: performance.now() - t0 }))
  })
}

t.test('LinkDirection.schedule() serialises back-to-back segments at the bandwidth and adds the one-way delay', async t => {
  const dir = new LinkDirection({ bitsPerSecond: 8e6, rttMs: 10 }) // 1000 bytes per ms
  t.equal(dir.delayMs, 5)
  t.equal(dir.schedule(0, 1000), 6, 'first segment: 1 ms on the wire + 5 ms delay')
  t.equal(dir.schedule(0, 2000), 8, 'queued behind the first: starts at 1 ms')
  t.equal(dir.schedule(100, 1000), 106, 'an idle link starts at once')
  const unlimited = new LinkDirection({ bitsPerSecond: Infinity, rttMs: 2 })
  t.equal(unlimited.schedule(50, 1e9), 51, 'no bandwidth limit: only the delay')
  t.throws(() => new LinkDirection({ bitsPerSecond: 0, rttMs: 1 }))
})

t.test('parseBandwidth() reads SI bit rates and describeLink() prints them', async t => {
  t.equal(parseBandwidth('1g'), 1e9)
  t.equal(parseBandwidth('2.5G'), 2.5e9)
  t.equal(parseBandwidth('500m'), 5e8)
  t.equal(parseBandwidth('inf'), Infinity)
  t.throws(() => parseBandwidth('fast'), /invalid bandwidth "fast"/)
  t.equal(describeLink({ bitsPerSecond: 1e9, rttMs: 1 }), '1 Gbit/s, RTT 1 ms')
  t.equal(describeLink({ bitsPerSecond: 5e8, rttMs: 0.5 }), '500 Mbit/s, RTT 0.5 ms')
})

t.test('ThrottleProxy limits a download to the link bandwidth and counts its bytes', async t => {
  const size = 1_000_000
  const port = await bulkServer(t, size)
  const proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: port, link: { bitsPerSecond: 16e6, rttMs: 2 } })
  t.teardown(async () => await proxy.close())
  const direct = await download(port)
  const r = await download(proxy.port)
  t.equal(r.bytes, size)
  t.ok(r.ms >= 480, `1 MB at 2 MB/s takes >= 0.5 s (took ${r.ms.toFixed(0)} ms; direct ${direct.ms.toFixed(0)} ms)`)
  t.ok(r.ms < 2500, `and not much longer (${r.ms.toFixed(0)} ms)`)
  t.equal(proxy.stats().bytesDown, size)
  t.equal(proxy.stats().connections, 1)
})

t.test('ThrottleProxy shares one node link between concurrent connections', async t => {
  const size = 500_000
  const port = await bulkServer(t, size)
  const proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: port, link: { bitsPerSecond: 16e6, rttMs: 1 } })
  t.teardown(async () => await proxy.close())
  const t0 = performance.now()
  const rs = await Promise.all([download(proxy.port), download(proxy.port)])
  const ms = performance.now() - t0
  t.same(rs.map(r => r.bytes), [size, size])
  t.ok(ms >= 480, `2 × 0.5 MB over one 2 MB/s link take >= 0.5 s together (took ${ms.toFixed(0)} ms)`)
  t.equal(proxy.stats().bytesDown, 2 * size)
})

t.test('ThrottleProxy adds the round-trip time to every request/response exchange', async t => {
  const server = createServer(s => { s.on('error', () => {}); s.on('data', b => s.write(b)) })
  t.teardown(() => { server.close() })
  const port = await listen(server)
  const rttMs = 20
  const proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: port, link: { bitsPerSecond: 1e9, rttMs } })
  t.teardown(async () => await proxy.close())
  const s: Socket = connect(proxy.port, '127.0.0.1')
  t.teardown(() => { s.destroy() })
  await new Promise(resolve => s.once('connect', resolve))
  const rtts: number[] = []
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now()
    s.write('ping')
    await new Promise(resolve => s.once('data', resolve))
    rtts.push(performance.now() - t0)
  }
  t.ok(rtts[0]! >= 2 * rttMs - 1, `first exchange pays the handshake too (${rtts[0]!.toFixed(1)} ms)`)
  for (const r of rtts.slice(1)) t.ok(r >= rttMs - 1, `exchange took ${r.toFixed(1)} ms, at least the RTT of ${rttMs} ms`)
  // Not much more either: judged on the median, so that one exchange descheduled on a loaded machine does not count.
  const median = [...rtts.slice(1)].sort((a, b) => a - b)[2]!
  t.ok(median < rttMs + 40, `median exchange ${median.toFixed(1)} ms for RTT ${rttMs} ms`)
  t.comment(`measured RTTs through the proxy: ${rtts.map(r => r.toFixed(1)).join(', ')} ms`)
})
