/**
 * Client certificates (`--cert-dir` with a `NAME.cert` + `NAME.key` pair,
 * containers-certs.d layout) against a real docker-registry that requires
 * one (`http.tls.clientcas`), and the identity-token POST going through
 * the transport's TLS options (CAs and client certificate) to an HTTPS
 * token server that also requires a client certificate.
 */
import t from 'tap'
import { copyFile, mkdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { TestRegistry } from '../../fixtures/docker-registry.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { buildLayerTar, file } from '../../fixtures/layer-dsl.js'
import { writeOciLayout } from '../../fixtures/oci-layout.js'
import { TokenServer } from '../../fixtures/token-server.js'
import { RegistryAuthError } from '../errors.js'
import { RegistryAuth } from './auth.js'
import { RegistryTransport } from './transport.js'

const work = t.testdir()
const registry = await TestRegistry.start(join(work, 'registry'), 'mtls')
t.teardown(() => registry.stop())
// The same CA without the client pair.
const caOnly = join(work, 'ca-only')
await mkdir(caOnly)
await copyFile(join(registry.certDir!, 'ca.crt'), join(caOnly, 'ca.crt'))

t.test('RegistryTransport presents the --cert-dir client certificate; without it the registry refuses the handshake', async t => {
  const withCert = await RegistryTransport.create(registry.hostPort, { certDir: registry.certDir, retries: 0 })
  t.teardown(() => withCert.close())
  const ok = await withCert.send({ url: '/v2/', what: 'ping' })
  await ok.body?.cancel()
  t.equal(ok.status, 200, 'the registry answers /v2/ to a client with the certificate')

  const without = await RegistryTransport.create(registry.hostPort, { certDir: caOnly, retries: 0 })
  t.teardown(() => without.close())
  await t.rejects(without.send({ url: '/v2/', what: 'ping' }), { name: 'RegistryError', message: new RegExp(`ping: cannot reach registry ${registry.hostPort}`) }, 'no client certificate: one line naming the registry')
})

t.test('layerctl push docker:// with --cert-dir holding a client certificate', async t => {
  const layout = await writeOciLayout(join(work, 'small'), { layers: [{ tar: buildLayerTar([file('a.txt', 'mtls')]) }] })
  await registry.seed(`oci:${layout.dir}:${layout.tag}`, 'small/img:v1', ['--preserve-digests'])
  const node = layerdNode(join(work, 'home'))
  const ok = await node.layerctl('push', `docker://${registry.hostPort}/small/img:v1`, 'small:v1', ...registry.pushFlags())
  t.equal(ok.code, 0, ok.stderr)
  const refused = await node.layerctl('push', `docker://${registry.hostPort}/small/img:v1`, 'small:v2', '--cert-dir', caOnly)
  t.not(refused.code, 0, 'without the client certificate the push fails')
  t.match(refused.stderr, registry.hostPort, `the error names the registry: ${refused.stderr.trim()}`)
  t.equal(refused.stderr.trim().split('\n').length, 1, 'in one line')
  const list = await node.layerctl('images')
  t.notMatch(list.stdout, 'small:v2', 'no ref left by the refused push')
})

t.test('the identity-token POST uses the transport\'s CAs and client certificate', async t => {
  const dir = join(work, 'registry')
  const tokens = await TokenServer.start({
    keyPem: await readFile(join(dir, 'server.key'), 'utf8'),
    certPem: await readFile(join(dir, 'server.crt'), 'utf8'),
    issuer: 'layerd-test-issuer',
    service: 'svc',
    refreshToken: 'the-identity-token',
    tls: { keyPem: await readFile(join(dir, 'server.key'), 'utf8'), certPem: await readFile(join(dir, 'server.crt'), 'utf8'), clientCaPem: await readFile(join(registry.certDir!, 'ca.crt'), 'utf8') }
  })
  t.teardown(() => tokens.stop())
  t.match(tokens.realm, /^https:/)
  const challenge = `Bearer realm="${tokens.realm}",service="svc",scope="repository:small/img:pull"`
  const transport = await RegistryTransport.create(registry.hostPort, { certDir: registry.certDir, retries: 0 })
  t.teardown(() => transport.close())

  const auth = new RegistryAuth(transport, registry.hostPort, 'repository:small/img:pull', async () => ({ username: '', password: '', identityToken: 'the-identity-token', from: 'test' }))
  await auth.unauthorized(challenge, 'manifest small/img:v1')
  t.match(await auth.header(), /^Bearer [\w-]+\.[\w-]+\.[\w-]+$/, 'a JWT from the HTTPS token server')
  t.equal(tokens.refreshGrants, 1, 'through the refresh-token grant (POST)')

  const wrong = new RegistryAuth(transport, registry.hostPort, 'repository:small/img:pull', async () => ({ username: '', password: '', identityToken: 'another-token', from: 'test' }))
  await t.rejects(wrong.unauthorized(challenge, 'manifest small/img:v1'), RegistryAuthError, 'a refused identity token is an auth error')

  const noClientCert = await RegistryTransport.create(registry.hostPort, { certDir: caOnly, retries: 0 })
  t.teardown(() => noClientCert.close())
  const refusedTls = new RegistryAuth(noClientCert, registry.hostPort, 'repository:small/img:pull', async () => ({ username: '', password: '', identityToken: 'the-identity-token', from: 'test' }))
  await t.rejects(refusedTls.unauthorized(challenge, 'manifest small/img:v1'), { message: /cannot reach/ }, 'without the client certificate the token server refuses the handshake')
  t.equal(tokens.refreshGrants, 1)
})
