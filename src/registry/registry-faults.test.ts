/**
 * Issue 12's failure cases, against a real docker-registry behind a proxy
 * that injects each fault (fixtures/registry-fault-proxy.ts): a blob whose
 * bytes do not match its digest, a connection dropped mid-blob (resumed
 * with Range), a schema-1 manifest. Each failure is one line naming the
 * object, and leaves no ref. One registry for the file; a small image
 * (8 MiB of seeded bytes, uncompressed, plus a gzip layer) keeps it quick.
 */
import t from 'tap'
import { join } from 'node:path'
import { TestRegistry } from '../../fixtures/docker-registry.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { buildLayerTar, dir, file, largeFile, whiteout } from '../../fixtures/layer-dsl.js'
import { writeOciLayout } from '../../fixtures/oci-layout.js'
import { RegistryFaultProxy } from '../../fixtures/registry-fault-proxy.js'
import { getManifest } from '../../fixtures/registry-push-check.js'
import { refsIn } from '../../fixtures/store-steps.js'

const work = t.testdir()
const registry = await TestRegistry.start(join(work, 'registry'), 'plain')
t.teardown(() => registry.stop())
const layout = await writeOciLayout(join(work, 'layout'), {
  layers: [
    { tar: buildLayerTar([largeFile('data/big.bin', 8 * 1024 * 1024, 'faults'), dir('etc'), file('etc/old.conf', 'old')]), compression: 'none' },
    { tar: buildLayerTar([file('app.txt', 'task 7'), whiteout('etc/old.conf')]), compression: 'gzip' }
  ]
})
// Uncompressed layers stay uncompressed (skopeo would gzip them): the flipped byte lands in file content.
await registry.seed(`oci:${layout.dir}:${layout.tag}`, 'faults/img:v1', ['--preserve-digests'])
const proxy = await RegistryFaultProxy.start(registry.hostPort)
t.teardown(() => proxy.stop())
const big = (await getManifest(registry, 'faults/img', 'v1')).layers[0]!

t.test('a blob whose bytes do not match its digest: one line naming the blob, no ref', async t => {
  proxy.corruptBlob(big.digest)
  t.teardown(() => { proxy.clearFaults() })
  const node = layerdNode(join(work, 'home-corrupt'))
  const r = await node.layerctl('push', `docker://${proxy.hostPort}/faults/img:v1`, 'faults:v1', '--tls-verify=false')
  t.equal(r.code, 1, r.stdout)
  t.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`)
  t.match(r.stderr, `layer 1 of 2 (${big.digest.slice(0, 19)}`)
  t.match(r.stderr, `not ${big.digest} (corrupt or tampered input)`)
  t.same(await refsIn(node.store), [], 'no ref')
})

t.test('a connection dropped mid-blob is resumed with Range; the image is the same as without the fault', async t => {
  const clean = layerdNode(join(work, 'home-clean'))
  const ok = await clean.layerctl('push', `docker://${registry.hostPort}/faults/img:v1`, 'faults:v1', '--tls-verify=false', '--json')
  t.equal(ok.code, 0, ok.stderr)
  const dropAt = 3 * 1024 * 1024
  proxy.dropBlobOnce(big.digest, dropAt)
  const seen = proxy.requests.length
  const node = layerdNode(join(work, 'home-drop'))
  const r = await node.layerctl('push', `docker://${proxy.hostPort}/faults/img:v1`, 'faults:v1', '--tls-verify=false', '--json')
  t.equal(r.code, 0, r.stderr)
  const gets = proxy.requests.slice(seen).filter(q => q.method === 'GET' && q.url.endsWith(`/blobs/${big.digest}`))
  t.equal(gets.length, 2, 'the blob was asked for twice')
  const resumedAt = Number(/^bytes=(\d+)-$/.exec(gets[1]?.range ?? '')?.[1])
  // The cut socket may lose what was in flight: the client resumes at what it actually received.
  t.ok(resumedAt > 0 && resumedAt <= dropAt, `the second request resumed where the first broke (Range: ${gets[1]?.range}; cut after ${dropAt} bytes sent)`)
  t.equal(gets[1]!.status, 206, 'and the registry answered with the rest')
  t.equal(JSON.parse(r.stdout).manifest, JSON.parse(ok.stdout).manifest, 'same manifest digest as the push without the fault')
})

t.test('a schema-1 manifest is refused: one line, no ref', async t => {
  const schema1 = Buffer.from(JSON.stringify({
    schemaVersion: 1, name: 'faults/img', tag: 'old', architecture: 'amd64',
    fsLayers: [{ blobSum: big.digest }], history: [{ v1Compatibility: '{"id":"x"}' }]
  }))
  proxy.overrideManifest('faults/img', 'old', schema1, 'application/vnd.docker.distribution.manifest.v1+prettyjws')
  const node = layerdNode(join(work, 'home-schema1'))
  const r = await node.layerctl('push', `docker://${proxy.hostPort}/faults/img:old`, 'faults:old', '--tls-verify=false')
  t.equal(r.code, 1, r.stdout)
  t.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`)
  t.match(r.stderr, /faults\/img:old: manifest sha256:[0-9a-f]{64} is a docker schema 1 manifest, which layerd does not read/)
  t.same(await refsIn(node.store), [], 'no ref')
})
