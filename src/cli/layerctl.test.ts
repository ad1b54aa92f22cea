/**
 * layerctl end to end: real processes, a real daemon (started on demand by
 * the CLI, stopped by the test), the embedded fs store.
 */
import t from 'tap'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { buildLayerTar, dir, file, largeFile, sampleLayerEntries, writeLayerTar } from '../../fixtures/layer-dsl.js'
import { writeOciLayout } from '../../fixtures/oci-layout.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { snapshotTar, snapshotTree, compareTrees } from '../../fixtures/tree-compare.js'

const work = t.testdir()
const node = layerdNode(join(work, 'home'))
t.teardown(() => node.stopDaemon())
const sample = join(work, 'sample.tar.zst')
await writeLayerTar(sample, sampleLayerEntries({ largeBytes: 3 * 1024 * 1024, sparseBytes: 4 * 1024 * 1024 }), 'zstd')

t.test('layerctl without a command prints usage and exits 2', async t => {
  const r = await node.layerctl()
  t.equal(r.code, 2)
  t.match(r.stdout, /usage: layerctl COMMAND/)
})

t.test('layerctl errors are one line naming the input, exit 1 or 2, no stack unless --debug', async t => {
  const missing = await node.layerctl('push', '/nonexistent/image.tar', 'a:v1')
  t.equal(missing.code, 1)
  t.match(missing.stderr, /\/nonexistent\/image\.tar/)
  t.equal(missing.stderr.trim().split('\n').length, 1, missing.stderr)
  const debug = await node.layerctl('push', '/nonexistent/image.tar', 'a:v1', '--debug')
  t.match(debug.stderr, /\n\s+at /, 'a stack with --debug')
  const badRef = await node.layerctl('push', sample, 'Bad:Name')
  t.equal(badRef.code, 2)
  t.match(badRef.stderr, /invalid image name "Bad:Name"/)
  const unknown = await node.layerctl('frobnicate')
  t.equal(unknown.code, 2)
  t.match(unknown.stderr, /unknown command "frobnicate"/)
  const badFlag = await node.layerctl('images', '--bogus')
  t.equal(badFlag.code, 2)
  t.match(badFlag.stderr, /--bogus/)
  const badStore = await node.layerctl('images', '--store', 'ftp://x')
  t.equal(badStore.code, 2)
  t.match(badStore.stderr, /invalid store URL "ftp:\/\/x"/)
  const notFound = await node.layerctl('inspect', 'nope:v1')
  t.equal(notFound.code, 1)
  t.match(notFound.stderr, /image nope:v1 not found in store file:/)
})

t.test('layerctl push, images, inspect, tag, history and rm', async t => {
  const push = await node.layerctl('push', sample, 'test/sample:v1')
  t.equal(push.code, 0, push.stderr)
  t.match(push.stdout, /layer 1\/1 sha256:[0-9a-f]{12}: .* new .* deduplicated/)
  const again = await node.layerctl('push', sample, 'test/sample:v1', '--json')
  const result = JSON.parse(again.stdout)
  t.equal(result.layers[0].newPlainBytes, 0, 'a second push uploads no chunk')
  const images = JSON.parse((await node.layerctl('images', '--json')).stdout)
  t.same(images.map((i: { ref: string }) => i.ref), ['test/sample:v1'])
  const inspect = JSON.parse((await node.layerctl('inspect', 'test/sample:v1', '--json')).stdout)
  t.equal(inspect.layers.length, 1)
  t.ok(inspect.storedBytes > 0 && inspect.storedBytes < inspect.imageBytes)
  t.equal((await node.layerctl('tag', 'test/sample:v1', 'test/copy:latest')).code, 0)
  await writeLayerTar(join(work, 'v2.tar'), [file('hello', 'v2')])
  await node.layerctl('push', join(work, 'v2.tar'), 'test/copy:latest')
  const history = JSON.parse((await node.layerctl('history', 'test/copy:latest', '--json')).stdout)
  t.equal(history.length, 2, 'two versions of the tag')
  t.equal(history[1].manifest, inspect.manifest, 'the older version is the tagged one')
  t.equal((await node.layerctl('rm', 'test/copy:latest')).code, 0)
  t.equal((await node.layerctl('inspect', 'test/copy:latest')).code, 1)
})

t.test('layerctl rebase puts an image\'s own layers on the new base without uploading them again', async t => {
  const baseV1 = buildLayerTar([dir('etc'), file('etc/os', 'v1'), largeFile('lib.so', 512 * 1024, 'base-1')])
  const baseV2 = buildLayerTar([dir('etc'), file('etc/os', 'v2'), largeFile('lib.so', 512 * 1024, 'base-2')])
  const app = buildLayerTar([dir('app'), largeFile('app/main.bin', 1024 * 1024, 'app')])
  await writeOciLayout(join(work, 'base1'), { layers: [{ tar: baseV1 }] })
  await writeOciLayout(join(work, 'base2'), { layers: [{ tar: baseV2 }] })
  await writeOciLayout(join(work, 'app'), { layers: [{ tar: baseV1 }, { tar: app }], config: { Cmd: ['/app/main.bin'], WorkingDir: '/app' } })
  t.equal((await node.layerctl('push', join(work, 'base1'), 'r/base:latest')).code, 0)
  t.equal((await node.layerctl('push', join(work, 'app'), 'r/app:v1')).code, 0)
  t.equal((await node.layerctl('push', join(work, 'base2'), 'r/base:latest')).code, 0)
  const blobs = async (): Promise<number> => (await readdir(join(node.home, 'store', 'blobs'))).length
  const before = await blobs()
  const app1 = JSON.parse((await node.layerctl('inspect', 'r/app:v1', '--json')).stdout)
  const r = await node.layerctl('rebase', 'r/app:v1', '--onto', 'r/base:latest', '--json')
  t.equal(r.code, 0, r.stderr)
  const rebased = JSON.parse(r.stdout)
  t.equal(await blobs(), before, 'no blob uploaded')
  const app2 = JSON.parse((await node.layerctl('inspect', 'r/app:v1', '--json')).stdout)
  t.match(app2.manifest, /^sha256:[0-9a-f]{64}$/)
  t.not(app2.manifest, app1.manifest, 'the tag now names another manifest')
  t.same(rebased, { manifest: app2.manifest, oldBaseLayers: 1, newBaseLayers: 1, ownLayers: 1, changed: true }, 'rebase reports the manifest the tag now names')
  const base2 = JSON.parse((await node.layerctl('inspect', 'r/base:latest', '--json')).stdout)
  t.equal(app2.layers[0].digest, base2.layers[0].digest, 'the lowest layer is the new base')
  t.equal(app2.config.config.WorkingDir, '/app', 'the image config is kept')
  t.same(app2.config.rootfs.diff_ids, app2.layers.map((l: { diffId: string }) => l.diffId))
  const out = join(work, 'rebased')
  t.equal((await node.layerctl('export', 'r/app:v1', '-C', out)).code, 0)
  const tree = await snapshotTree(out)
  t.equal(tree.get('app/main.bin')?.size, 1024 * 1024)
  const again = await node.layerctl('rebase', 'r/app:v1', '--onto', 'r/base:latest', '--json')
  t.equal(JSON.parse(again.stdout).changed, false, 'already on the newest base')
})

t.test('layerctl pull and export through the daemon, exact and atomic', async t => {
  const pull = await node.layerctl('pull', 'test/sample:v1', '--all', '--json')
  t.equal(pull.code, 0, pull.stderr)
  t.ok(JSON.parse(pull.stdout).chunks > 0)
  const tarOut = join(work, 'out.tar')
  const exp = await node.layerctl('export', 'test/sample:v1', '-o', tarOut, '--json')
  t.equal(exp.code, 0, exp.stderr)
  t.equal(JSON.parse(exp.stdout).fetchedBytes, 0, 'pulled: the export reads only the cache')
  const skip = { skip: (p: string) => p === '' || p.includes('.wh.') }
  t.same(compareTrees(await snapshotTar(sample), await snapshotTar(tarOut), skip), [])
  const dirOut = join(work, 'outdir')
  t.equal((await node.layerctl('export', 'test/sample:v1', '-C', dirOut)).code, 0)
  t.same(compareTrees(await snapshotTar(sample), await snapshotTree(dirOut), skip), [])
  const notEmpty = await node.layerctl('export', 'test/sample:v1', '-C', dirOut)
  t.equal(notEmpty.code, 2)
  t.match(notEmpty.stderr, /not empty/)
  const bad = await node.layerctl('export', 'nope:v1', '-o', join(work, 'nope.tar'))
  t.equal(bad.code, 1)
  t.notOk((await readdir(work)).some(f => f.includes('nope')), 'a failed export leaves no file behind')
})

t.test('layerd stops on SIGTERM, removing its socket and pid file', async t => {
  const pid = await node.daemonPid()
  t.ok(pid !== undefined && pid > 0, 'the CLI started a daemon')
  await node.stopDaemon()
  t.equal(await node.daemonPid(), undefined, 'pid file removed')
  t.notOk((await readdir(node.home)).includes('layerd.sock'), 'socket removed')
})
