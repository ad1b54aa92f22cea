/**
 * The layerd snapshotter under a real containerd 1.6 (Debian's), started
 * here with its own root, state, sockets and config: ordinary snapshots
 * (containerd pulls from a loopback docker-registry and unpacks into
 * them), `ctr run` on them, `ctr snapshots ls/rm`, and containerd's GC
 * after `ctr image rm` leaving no directory and no mount behind.
 */
import t from 'tap'
import { existsSync } from 'node:fs'
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { ContainerdInstance } from '../../fixtures/containerd.js'
import { layerdNode, mountsUnder } from '../../fixtures/layerd-harness.js'
import { LocalRegistry } from '../../bench/deploy/local-registry.js'
import { snapshotterSocketPath } from './containerd-snapshotter.js'

const images = await ensureDebianImages()
// Short paths: unix socket names are limited to 104–108 bytes (containerd's ttrpc socket sits next to its grpc one).
const work = await mkdtemp('/tmp/layerd-ctd-')
t.teardown(async () => await rm(work, { recursive: true, force: true }))
const node = layerdNode(join(work, 'node'))
await node.startDaemon()
t.teardown(async () => await node.stopDaemon())
// The snapshotter starts right after the control socket.
for (let i = 0; i < 100 && !existsSync(snapshotterSocketPath(node.home)); i++) await new Promise(resolve => setTimeout(resolve, 100))

const registry = await LocalRegistry.start(join(work, 'registry'))
t.teardown(async () => await registry.stop())
await registry.push(images.images['python-v1'].ociLayout, 'deb/python:v1')
const ref = `${registry.hostPort}/deb/python:v1`

const containerd = await ContainerdInstance.start({ dir: join(work, 'containerd'), snapshotterSocket: snapshotterSocketPath(node.home) })
t.teardown(async () => await containerd.stop())
const snapshotsDir = join(node.home, 'snapshotter', 'snapshots')

t.test('ctr image pull --snapshotter layerd of a registry image layerd does not hold: ordinary snapshots, and it runs', async t => {
  t.ok(existsSync(snapshotterSocketPath(node.home)), 'layerd serves <home>/snapshotter.sock')
  const pull = await containerd.ctr('images', 'pull', '--plain-http', '--snapshotter', 'layerd', ref)
  t.equal(pull.code, 0, `pulled: ${pull.stderr.slice(-500)}`)
  const ls = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'ls')
  t.equal(ls.stdout.split('\n').filter(l => l.includes('Committed')).length, images.images['python-v1'].layers.length, `one committed snapshot per layer:\n${ls.stdout}`)
  const run = await containerd.ctr('run', '--rm', '--snapshotter', 'layerd', ref, 'ordinary-1', 'python3', '-c', 'print(6*7)')
  t.equal(run.stdout.trim(), '42', `ran: ${run.stderr.slice(-500)}`)
  t.equal(await mountsUnder(snapshotsDir), 0, 'the container\'s overlay is gone with --rm')
})

t.test('ctr snapshots prepare, mounts and rm leave nothing behind', async t => {
  const before = new Set(await readdir(snapshotsDir))
  const prep = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'prepare', 'scratch-1')
  t.equal(prep.code, 0, prep.stderr)
  const added = (await readdir(snapshotsDir)).filter(d => !before.has(d))
  t.equal(added.length, 1, 'a directory for the new snapshot')
  const mounts = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'mounts', '/tmp/x', 'scratch-1')
  t.match(mounts.stdout, new RegExp(`mount -t bind ${snapshotsDir}/${added[0]}/fs /tmp/x -o rw,rbind`), 'a snapshot without parent is a bind of its directory')
  const again = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'prepare', 'scratch-1')
  t.not(again.code, 0, 'a taken key is refused')
  t.match(again.stderr, /already exists/)
  const rm = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'rm', 'scratch-1')
  t.equal(rm.code, 0, rm.stderr)
  // containerd's metadata store forgets the key at once; its GC then calls our Remove (scheduled, within a second or so).
  for (let i = 0; i < 300 && existsSync(join(snapshotsDir, added[0]!)); i++) await new Promise(resolve => setTimeout(resolve, 100))
  t.notOk(existsSync(join(snapshotsDir, added[0]!)), 'its directory is gone once containerd\'s GC has run')
  const missing = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'rm', 'scratch-1')
  t.not(missing.code, 0, 'removing it again fails')
  t.match(missing.stderr, /not found|does not exist/)
})

t.test('with the layers in layerd\'s store from a registry push, a containerd pull of that registry image downloads no layer blob', async t => {
  const push = await node.layerctl('push', `docker://${ref}`, 'deb/python:v1', '--tls-verify=false')
  t.equal(push.code, 0, `layerctl push docker://…: ${push.stderr}`)
  const logFile = join(registry.dir, 'registry.log')
  const logBefore = (await readFile(logFile, 'utf8')).length
  // Its own namespace: the default one still holds the ordinary snapshots of the first pull.
  const pull = await node.layerctl('containerd', 'pull', `docker://${ref}`, '--tls-verify=false', '--address', containerd.address, '--namespace', 'lazy', '--json')
  t.equal(pull.code, 0, pull.stderr)
  const r = JSON.parse(pull.stdout) as { name: string, layers: number, remote: number }
  t.equal(r.remote, r.layers, 'every layer found by its blob digest (layer-by-blob) and served remotely')
  const log = (await readFile(logFile, 'utf8')).slice(logBefore)
  const layerGets = images.images['python-v1'].layers.filter(l => log.includes(`GET /v2/deb/python/blobs/${l.digest}`))
  t.same(layerGets, [], 'the registry served no layer blob')
  t.match(log, /GET \/v2\/deb\/python\/manifests\/v1/, 'it served the manifest (the log is the right one)')
  const run = await containerd.ctr('-n', 'lazy', 'run', '--rm', '--snapshotter', 'layerd', r.name, 'from-registry-1', 'python3', '-c', 'print(6*7)')
  t.equal(run.stdout.trim(), '42', run.stderr)
  t.equal((await containerd.ctr('-n', 'lazy', 'images', 'rm', '--sync', r.name)).code, 0)
})

t.test('containerd\'s GC after ctr image rm removes every snapshot, directory and mount', async t => {
  const rm = await containerd.ctr('images', 'rm', '--sync', ref)
  t.equal(rm.code, 0, rm.stderr)
  const ls = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'ls')
  t.equal(ls.stdout.trim().split('\n').length, 1, `only the header is left:\n${ls.stdout}`)
  t.same(await readdir(snapshotsDir), [], 'no snapshot directory left')
  t.equal(await mountsUnder(join(node.home, 'snapshotter')), 0, 'no mount left')
})
