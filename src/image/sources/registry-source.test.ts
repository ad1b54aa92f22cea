/**
 * Issue 12: `layerctl push docker://…` from a real docker-registry on
 * loopback (plain HTTP; one registry for the whole file): the Debian python
 * image exports exactly as its source tree (fs and S3 stores), inspect
 * shows where it came from, a second push downloads no layer blob (the
 * registry's log), layer-by-blob hints are recorded, export then push gives
 * the same manifest digest (each exported layer is the registry layer's
 * uncompressed tar, byte for byte), and an index with two
 * platforms picks this host's image, `--platform` the other, attestations
 * skipped.
 */
import t from 'tap'
import { join } from 'node:path'
import { ensureDebianImages } from '../../../fixtures/debian-images.js'
import { TestRegistry } from '../../../fixtures/docker-registry.js'
import { layerdNode } from '../../../fixtures/layerd-harness.js'
import { blobGets, exportDiff, headManifest, putIndex } from '../../../fixtures/registry-push-check.js'
import { startS3rver } from '../../../fixtures/s3rver.js'
import { digestHex } from '../../format/digest.js'
import { layerByBlobKey } from '../../format/keys.js'
import { parseRef } from '../../format/ref.js'
import { openMemoryNodeDb } from '../../state/node-db.js'
import { openStore } from '../../store/open-store.js'
import { ChunkFetcher } from '../../cache/chunk-fetcher.js'
import { MemoryChunkCache } from '../../cache/memory-chunk-cache.js'
import { exportImageLayout } from '../../materialize/export-layout.js'
import { loadImage } from '../load-image.js'
import { pushImage } from '../push.js'
import { loadTarSplit } from '../tar-splits.js'

const images = await ensureDebianImages()
const python = images.images['python-v1']
const base = images.images.base
const work = t.testdir()
const registry = await TestRegistry.start(join(work, 'registry'), 'plain')
t.teardown(() => registry.stop())
await registry.seed(`oci:${python.ociLayout}:${python.ociTag}`, 'deb/python:v1')
const src = `docker://${registry.hostPort}/deb/python:v1`
const layerDigests = python.layers.map(l => l.digest)

t.test('layerctl push docker:// (plain HTTP) exports exactly; inspect names the source; a second push downloads no layer blob', async t => {
  const node = layerdNode(join(work, 'home'))
  const first = await node.layerctl('push', src, 'deb/python:v1', '--tls-verify=false')
  t.equal(first.code, 0, first.stderr)
  const store = openStore(node.store)
  t.teardown(() => store.close())
  const { diff, paths } = await exportDiff(store, 'deb/python:v1', python.rootfs, work)
  t.same(diff, [], `export of the registry push equals the source tree (${paths} paths)`)

  const inspect = await node.layerctl('inspect', 'deb/python:v1')
  const served = await headManifest(registry, 'deb/python', 'v1')
  t.match(inspect.stdout, `source     ${src} (manifest ${served.digest})`, 'inspect shows the registry reference and its manifest digest')

  for (const d of layerDigests) t.ok(await store.stat(layerByBlobKey(digestHex(d))), `layer-by-blob/${d.slice(7, 19)} recorded`)

  const before = (await registry.requests()).length
  const second = await node.layerctl('push', src, 'deb/python:again', '--tls-verify=false')
  t.equal(second.code, 0, second.stderr)
  t.match(second.stdout, /already stored \(same blob digest\), not read/)
  t.equal(await blobGets(registry, before, layerDigests), 0, 'the second push downloaded no layer blob (registry access log)')
  const reqs = (await registry.requests()).slice(before)
  t.ok(reqs.some(r => r.uri.includes('/manifests/')) && reqs.some(r => r.uri.endsWith(`/blobs/${python.configDigest}`)), 'only the manifest and config were fetched')
  t.equal(first.stdout.split('\n').at(-2)!.split(' ')[1], second.stdout.split('\n').at(-2)!.split(' ')[1], 'same manifest digest')

  // The round trip: out of the store and in again, the registry image is the same image.
  const pushedManifest = JSON.parse((await node.layerctl('inspect', 'deb/python:v1', '--json')).stdout).manifest
  for (const [format, back] of [['oci', (p: string) => `oci:${p}:v1`], ['docker-archive', (p: string) => `docker-archive:${p}`]] as const) {
    const out = join(work, `registry-export.${format}`)
    const exported = await node.layerctl('export', 'deb/python:v1', '--format', format, '-o', out, '--json')
    t.equal(exported.code, 0, exported.stderr)
    t.same(JSON.parse(exported.stdout).layers.map((l: { digest: string }) => l.digest), python.layers.map(l => l.diffId),
      `export --format ${format}: each layer is the registry layer's tar, byte for byte (the source config's diff_ids)`)
    const again = await node.layerctl('push', back(out), `deb/python:${format}-back`, '--json')
    t.equal(again.code, 0, again.stderr)
    t.equal(JSON.parse(again.stdout).manifest, pushedManifest, `push of the ${format} export gives the registry push's manifest digest`)
  }
})

t.test('push docker:// into the S3 store (s3rver) exports exactly', async t => {
  const s3 = await startS3rver(join(work, 's3'))
  t.teardown(() => s3.stop())
  const store = openStore(`s3://${s3.bucket}/layerd`, { s3Endpoint: s3.endpoint })
  t.teardown(() => store.close())
  const db = openMemoryNodeDb()
  const pushed = await pushImage(src, parseRef('deb/python:v1'), { store, db, registry: { env: {}, tlsVerify: false } })
  const { diff, paths } = await exportDiff(store, 'deb/python:v1', python.rootfs, work)
  t.same(diff, [], `export from S3 equals the source tree (${paths} paths)`)

  const fetcher = new ChunkFetcher(store, new MemoryChunkCache())
  t.teardown(() => fetcher.close())
  const out = join(work, 's3-export.oci')
  const exported = await exportImageLayout(await loadImage(store, 'deb/python:v1'), parseRef('deb/python:v1'), fetcher, 'oci', out,
    { tarSplit: async toc => await loadTarSplit(store, toc) })
  t.same(exported.layers.map(l => l.digest), python.layers.map(l => l.diffId), 'the image itself out of S3: the registry layers\' tars, byte for byte')
  const back = await pushImage(`oci:${out}:v1`, parseRef('deb/python:back'), { store, db })
  t.equal(back.manifest, pushed.manifest, 'and pushed back, the same manifest digest')
})

t.test('an index with two platforms: this host gets its image, --platform the other, attestations skipped', async t => {
  await registry.seed(`oci:${base.ociLayout}:${base.ociTag}`, 'deb/multi:base')
  await registry.seed(`oci:${python.ociLayout}:${python.ociTag}`, 'deb/multi:python')
  const py = await headManifest(registry, 'deb/multi', 'python')
  const bs = await headManifest(registry, 'deb/multi', 'base')
  const index = await putIndex(registry, 'deb/multi', 'v1', [
    // An attestation first, pointing at an image manifest as buildkit's do: it must never be chosen.
    { ...bs, platform: { os: 'unknown', architecture: 'unknown' }, annotations: { 'vnd.docker.reference.type': 'attestation-manifest', 'vnd.docker.reference.digest': py.digest } },
    { ...bs, platform: { os: 'linux', architecture: 'arm64', variant: 'v8' } },
    { ...py, platform: { os: 'linux', architecture: 'amd64' } }
  ])
  const node = layerdNode(join(work, 'home-multi'))
  const host = await node.layerctl('push', `docker://${registry.hostPort}/deb/multi:v1`, 'multi:host', '--tls-verify=false')
  t.equal(host.code, 0, host.stderr)
  const arm = await node.layerctl('push', `docker://${registry.hostPort}/deb/multi:v1`, 'multi:arm', '--tls-verify=false', '--platform', 'linux/arm64')
  t.equal(arm.code, 0, arm.stderr)
  const hostInspect = JSON.parse((await node.layerctl('inspect', 'multi:host', '--json')).stdout)
  const armInspect = JSON.parse((await node.layerctl('inspect', 'multi:arm', '--json')).stdout)
  t.equal(hostInspect.source.manifest, py.digest, 'this host (linux/amd64) gets the python image')
  t.equal(hostInspect.source.index, index, 'from the index')
  t.equal(hostInspect.layers.length, 2)
  t.equal(armInspect.source.manifest, bs.digest, '--platform linux/arm64 gets the other image')
  t.equal(armInspect.layers.length, 1)
  const none = await node.layerctl('push', `docker://${registry.hostPort}/deb/multi:v1`, 'multi:s390x', '--tls-verify=false', '--platform', 'linux/s390x')
  t.equal(none.code, 1)
  t.match(none.stderr, /has no image for linux\/s390x \(it has: linux\/arm64\/v8, linux\/amd64\); choose one with --platform/)
  t.equal(none.stderr.trim().split('\n').length, 1, 'one line')
})
