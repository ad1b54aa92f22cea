/**
 * RegistryTransport against small HTTP servers on loopback: a redirect to
 * another host loses the Authorization header (same host keeps it), 5xx
 * and 429 are retried with backoff and then reported in one line, a
 * refused connection is one line naming the registry.
 */
import t from 'tap'
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import { RegistryTransport } from './transport.js'

async function serve (handler: Parameters<typeof createServer>[1]): Promise<{ server: Server, hostPort: string }> {
  const server = createServer(handler)
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise(resolve => { server.closeAllConnections(); server.close(resolve) }))
  return { server, hostPort: `127.0.0.1:${(server.address() as { port: number }).port}` }
}

t.test('send() follows redirects, dropping Authorization when one leads to another host', async t => {
  const seen: Array<{ host: string, url: string, headers: IncomingHttpHeaders }> = []
  const storage = await serve((req, res) => { seen.push({ host: 'storage', url: req.url!, headers: req.headers }); res.end('blob bytes') })
  // "localhost" is another host than "127.0.0.1" for the redirect rule, even on the same machine.
  const storageUrl = `http://localhost:${storage.hostPort.split(':')[1]}`
  const registry = await serve((req, res) => {
    seen.push({ host: 'registry', url: req.url!, headers: req.headers })
    if (req.url === '/v2/r/blobs/a') { res.writeHead(307, { Location: '/v2/r/blobs/a-here' }).end(); return }
    if (req.url === '/v2/r/blobs/a-here') { res.writeHead(307, { Location: `${storageUrl}/bucket/a?sig=1` }).end(); return }
    res.writeHead(404).end()
  })
  const transport = await RegistryTransport.create(registry.hostPort, { tlsVerify: false })
  t.teardown(() => transport.close())
  const res = await transport.send({ url: `http://${registry.hostPort}/v2/r/blobs/a`, headers: { Authorization: 'Bearer secret' }, what: 'blob a' })
  t.equal(await res.text(), 'blob bytes')
  t.same(seen.map(s => [s.host, s.url, s.headers.authorization]), [
    ['registry', '/v2/r/blobs/a', 'Bearer secret'],
    ['registry', '/v2/r/blobs/a-here', 'Bearer secret'],
    ['storage', '/bucket/a?sig=1', undefined]
  ], 'credentials go to the registry only')
})

t.test('send() retries 5xx and 429 with backoff, then fails in one line', async t => {
  let calls = 0
  const flaky = await serve((_req, res) => {
    calls++
    if (calls === 1) { res.writeHead(503).end(); return }
    if (calls === 2) { res.writeHead(429, { 'Retry-After': '0' }).end(); return }
    res.end('ok')
  })
  const transport = await RegistryTransport.create(flaky.hostPort, { tlsVerify: false, retryBaseMs: 10 })
  t.teardown(() => transport.close())
  const res = await transport.send({ url: '/v2/', what: 'ping' })
  t.equal(await res.text(), 'ok')
  t.equal(calls, 3, 'two retries')
  t.equal(await transport.baseUrl(), `http://${flaky.hostPort}`, 'an endpoint without TLS is used over HTTP when TLS is not verified')

  const down = await serve((_req, res) => { res.writeHead(500, 'Internal Server Error').end() })
  const failing = await RegistryTransport.create(down.hostPort, { tlsVerify: false, retries: 2, retryBaseMs: 10 })
  t.teardown(() => failing.close())
  await t.rejects(failing.send({ url: '/v2/x', what: 'manifest M' }), { code: 'ERR_REGISTRY', message: `manifest M: registry ${down.hostPort} answered 500 Internal Server Error (after 3 attempts)` })
})

t.test('send() to a port nobody listens on fails in one line naming the registry', async t => {
  const gone = await serve(() => {})
  const port = gone.hostPort
  await new Promise(resolve => { gone.server.close(resolve) })
  const transport = await RegistryTransport.create(port, { tlsVerify: true, retries: 1, retryBaseMs: 10 })
  t.teardown(() => transport.close())
  await t.rejects(transport.send({ url: '/v2/', what: 'ping' }), { code: 'ERR_REGISTRY', message: new RegExp(`^ping: cannot reach registry ${port}: .*ECONNREFUSED.* \\(after 2 attempts\\)$`) })
})
