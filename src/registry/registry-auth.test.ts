/**
 * Issue 12's authenticated registries, each a real docker-registry on
 * loopback started here (one of each for the file):
 *
 * - TLS with a CA made by the test (`--cert-dir`) + htpasswd basic auth:
 *   the Debian python image pushes and exports exactly; credentials from
 *   --creds, $REGISTRY_AUTH_FILE and a docker credential helper; wrong
 *   credentials and an unknown CA are one-line errors with no ref;
 * - token auth (fixtures/token-server.ts signs the JWTs the registry
 *   verifies): the python image pushes and exports exactly; a token the
 *   registry stops accepting mid-push (401) is renewed, and one near its
 *   stated expiry is renewed before it is used.
 */
import t from 'tap'
import { chmod, mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { REGISTRY_PASSWORD, REGISTRY_USER, TestRegistry } from '../../fixtures/docker-registry.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { buildLayerTar, file, largeFile } from '../../fixtures/layer-dsl.js'
import { writeOciLayout } from '../../fixtures/oci-layout.js'
import { RegistryFaultProxy } from '../../fixtures/registry-fault-proxy.js'
import { exportDiff } from '../../fixtures/registry-push-check.js'
import { openStore } from '../store/open-store.js'
import { refsIn } from '../../fixtures/store-steps.js'

const images = await ensureDebianImages()
const python = images.images['python-v1']
const work = t.testdir()

t.test('TLS (CA made here) + htpasswd basic auth', async t => {
  const registry = await TestRegistry.start(join(work, 'registry-basic'), 'basic')
  t.teardown(() => registry.stop())
  await registry.seed(`oci:${python.ociLayout}:${python.ociTag}`, 'deb/python:v1')
  const src = `docker://${registry.hostPort}/deb/python:v1`
  const node = layerdNode(join(work, 'home-basic'), { env: { DOCKER_CONFIG: join(work, 'no-docker-config'), REGISTRY_AUTH_FILE: '' } })

  const pushed = await node.layerctl('push', src, 'deb/python:v1', ...registry.pushFlags())
  t.equal(pushed.code, 0, pushed.stderr)
  const store = openStore(node.store)
  t.teardown(() => store.close())
  const { diff, paths } = await exportDiff(store, 'deb/python:v1', python.rootfs, work)
  t.same(diff, [], `export equals the source tree (${paths} paths)`)

  const wrong = await node.layerctl('push', src, 'deb/python:wrong', '--cert-dir', registry.certDir!, '--creds', `${REGISTRY_USER}:not-the-password`)
  t.equal(wrong.code, 1)
  t.equal(wrong.stderr.trim().split('\n').length, 1, `one line: ${wrong.stderr}`)
  t.match(wrong.stderr, `refused the credentials of ${REGISTRY_USER} (from --creds)`)
  const none = await node.layerctl('push', src, 'deb/python:none', '--cert-dir', registry.certDir!)
  t.equal(none.code, 1)
  t.match(none.stderr, /requires authentication \(Basic\); give --creds USER:PASS or log in/)
  const untrusted = await node.layerctl('push', src, 'deb/python:untrusted', '--creds', `${REGISTRY_USER}:${REGISTRY_PASSWORD}`)
  t.equal(untrusted.code, 1)
  t.equal(untrusted.stderr.trim().split('\n').length, 1, `one line: ${untrusted.stderr}`)
  t.match(untrusted.stderr, new RegExp(`cannot reach registry ${registry.hostPort}: .*(certificate|issuer)`), 'an unknown CA is refused')
  t.same((await refsIn(node.store)).sort(), ['refs/deb%2Fpython/v1'], 'the failures left no ref')

  // The same image again, with credentials from an auth file, then from a credential helper:
  // its layers are stored, so only the (authenticated) manifest and config requests are made.
  const authFile = join(work, 'auth.json')
  await writeFile(authFile, JSON.stringify({ auths: { [registry.hostPort]: { auth: Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString('base64') } } }))
  const viaFile = await layerdNode(node.home, { env: { REGISTRY_AUTH_FILE: authFile } }).layerctl('push', src, 'deb/python:file', '--cert-dir', registry.certDir!)
  t.equal(viaFile.code, 0, viaFile.stderr)

  const helperDir = join(work, 'helper-bin')
  const dockerConfig = join(work, 'docker-config')
  await mkdir(helperDir)
  await mkdir(dockerConfig)
  const helper = join(helperDir, 'docker-credential-layerdtest')
  await writeFile(helper, `#!/bin/sh\nread server\n[ "$1" = get ] && [ "$server" = "${registry.hostPort}" ] && printf '{"ServerURL":"%s","Username":"${REGISTRY_USER}","Secret":"${REGISTRY_PASSWORD}"}' "$server" && exit 0\necho "credentials not found in native keychain"; exit 1\n`)
  await chmod(helper, 0o755)
  await writeFile(join(dockerConfig, 'config.json'), JSON.stringify({ credHelpers: { [registry.hostPort]: 'layerdtest' } }))
  const viaHelper = await layerdNode(node.home, { env: { DOCKER_CONFIG: dockerConfig, REGISTRY_AUTH_FILE: '', PATH: `${helperDir}:${process.env.PATH ?? ''}` } })
    .layerctl('push', src, 'deb/python:helper', '--cert-dir', registry.certDir!)
  t.equal(viaHelper.code, 0, viaHelper.stderr)
  t.match(viaHelper.stdout, /already stored \(same blob digest\)/)
})

t.test('token auth (a token server written for the test; the registry verifies its signed JWTs)', async t => {
  const registry = await TestRegistry.start(join(work, 'registry-token'), 'token')
  t.teardown(() => registry.stop())
  await registry.seed(`oci:${python.ociLayout}:${python.ociTag}`, 'deb/python:v1')
  const node = layerdNode(join(work, 'home-token'))
  const issuedBefore = registry.tokens!.issued
  const pushed = await node.layerctl('push', `docker://${registry.hostPort}/deb/python:v1`, 'deb/python:v1', '--tls-verify=false')
  t.equal(pushed.code, 0, pushed.stderr)
  t.ok(registry.tokens!.issued > issuedBefore, 'a token was fetched from the token server')
  const store = openStore(node.store)
  t.teardown(() => store.close())
  const { diff, paths } = await exportDiff(store, 'deb/python:v1', python.rootfs, work)
  t.same(diff, [], `export equals the source tree (${paths} paths)`)

  // A small image behind a proxy that holds the config request for 3 s.
  const layout = await writeOciLayout(join(work, 'small'), { layers: [{ tar: buildLayerTar([largeFile('big.bin', 2 * 1024 * 1024, 'token'), file('a.txt', 'a')]) }] })
  await registry.seed(`oci:${layout.dir}:${layout.tag}`, 'small/img:v1', ['--preserve-digests'])
  const proxy = await RegistryFaultProxy.start(registry.hostPort)
  t.teardown(() => proxy.stop())
  proxy.delay(`/blobs/${layout.config.digest}`, 3000)
  const blobGets = (from: number): Array<{ status: number }> => proxy.requests.slice(from).filter(r => r.url.endsWith(`/blobs/${layout.layers[0]!.digest}`))

  t.test('a token the registry stops accepting before its stated expiry: the 401 is answered with a new token', async t => {
    registry.tokens!.lifetimeSeconds = 2 // the registry accepts it for 2 s …
    registry.tokens!.claimedExpiresIn = 300 // … while the token server says 300
    const from = proxy.requests.length
    const issued = registry.tokens!.issued
    const r = await layerdNode(join(work, 'home-expired')).layerctl('push', `docker://${proxy.hostPort}/small/img:v1`, 'small:v1', '--tls-verify=false')
    t.equal(r.code, 0, r.stderr)
    t.same(blobGets(from).map(q => q.status), [401, 200], 'the layer GET was refused with the expired token, then served with a new one')
    t.equal(registry.tokens!.issued - issued, 2, 'two tokens: the first, and its renewal after the 401')
  })

  t.test('a token near its stated expiry is renewed before it is used (no 401)', async t => {
    registry.tokens!.lifetimeSeconds = 7
    registry.tokens!.claimedExpiresIn = 7 // renewed 5 s before: after ~2 s, during the 3 s config wait
    const from = proxy.requests.length
    const issued = registry.tokens!.issued
    const r = await layerdNode(join(work, 'home-renew')).layerctl('push', `docker://${proxy.hostPort}/small/img:v1`, 'small:v2', '--tls-verify=false')
    t.equal(r.code, 0, r.stderr)
    t.same(blobGets(from).map(q => q.status), [200], 'the layer GET carried a fresh token')
    t.equal(registry.tokens!.issued - issued, 2, 'the token was renewed once, ahead of its expiry')
  })
})
