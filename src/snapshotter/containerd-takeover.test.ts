/**
 * Lazy snapshots survive layerd's crash: a container runs under a real
 * containerd 1.6 on the python image's remote (lazy FUSE) snapshots, with
 * layerd under its holder, and reads files of the image in a loop (sha256
 * checked, each file's page cache dropped before it is read, so reads reach
 * layerd) while layerd is SIGKILLed 3 times. The new daemon takes the lazy
 * mounts over like any other kept connection (src/holder/README.md).
 */
import t from 'tap'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { ContainerdInstance } from '../../fixtures/containerd.js'
import { layerdNode, mountsUnder } from '../../fixtures/layerd-harness.js'
import { servingPid } from '../../fixtures/takeover-workload.js'
import { VERIFYING_READER_PY, expectedFiles, lastReport, readerLists } from '../../fixtures/verifying-readers.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { snapshotterSocketPath } from './containerd-snapshotter.js'

const KILLS = 3
const images = await ensureDebianImages()
// Short paths: unix socket names are limited to 104–108 bytes.
const work = await mkdtemp('/tmp/layerd-ctk-')
t.teardown(async () => await rm(work, { recursive: true, force: true }))
const node = layerdNode(join(work, 'node'))
{
  const store = openStore(node.store)
  await pushImage(images.images['python-v1'].dockerArchive, parseRef('deb/python:v1'), { store, db: openMemoryNodeDb() })
  await store.close()
}
// Through the launcher: layerd runs under its holder, which keeps the FUSE connections.
const started = await node.layerctl('stats')
if (started.code !== 0) throw new Error(`layerctl stats could not start layerd: ${started.stderr}`)
t.teardown(async () => await node.stopDaemon())
for (let i = 0; i < 100 && !existsSync(snapshotterSocketPath(node.home)); i++) await new Promise(resolve => setTimeout(resolve, 100))
const containerd = await ContainerdInstance.start({ dir: join(work, 'ctd'), snapshotterSocket: snapshotterSocketPath(node.home) })
t.teardown(async () => await containerd.stop())

t.test('a container on lazy snapshots reads correct bytes across 3 layerd SIGKILLs; each new daemon takes the lazy mounts over', async t => {
  const pull = await node.layerctl('containerd', 'pull', 'deb/python:v1', '--address', containerd.address, '--json')
  t.equal(pull.code, 0, pull.stderr)
  t.equal((JSON.parse(pull.stdout) as { remote: number, layers: number }).remote, (JSON.parse(pull.stdout) as { layers: number }).layers, 'every layer is a remote snapshot')
  const out = join(work, 'out')
  await mkdir(out)
  const files = readerLists(await expectedFiles(images.images['python-v1'].rootfs), 1, 150)[0]!
  await writeFile(join(out, 'spec.json'), JSON.stringify({ root: '', files, until: Date.now() / 1000 + 300, stopFile: '/out/stop', pauseS: 0.005 }))
  const run = await containerd.ctr('run', '-d', '--snapshotter', 'layerd', '--mount', `type=bind,src=${out},dst=/out,options=rbind:rw`,
    'deb/python:v1', 'lazy-kill', 'sh', '-c', 'python3 -c "$0" < /out/spec.json > /out/report.json 2> /out/stderr.txt', VERIFYING_READER_PY)
  t.equal(run.code, 0, run.stderr)
  const snapshotsDir = join(node.home, 'snapshotter', 'snapshots')
  const lazyMounts = await mountsUnder(snapshotsDir)
  t.ok(lazyMounts > 0, `the container stands on ${lazyMounts} lazy mount(s)`)
  // python-v1's top layer stacks: the container's overlay also stands on the node's shared base mount of its lower layer.
  const imagesDir = join(node.home, 'images')
  const baseMounts = await mountsUnder(imagesDir)
  t.equal(baseMounts, 1, 'and on one shared base mount')
  let pid = await servingPid(node.home, undefined)
  const pids = [pid]
  let lastKillAt = 0
  for (let i = 0; i < KILLS; i++) {
    await new Promise(resolve => setTimeout(resolve, 1_500))
    lastKillAt = Date.now() / 1000
    await node.killDaemon()
    pid = await servingPid(node.home, pid)
    pids.push(pid)
  }
  await new Promise(resolve => setTimeout(resolve, 1_500))
  // Readiness, not a deadline: on a loaded machine the reader may not have gone once through its files yet.
  // Stop it once it has read them all more than once and read after the last kill (or after 2 minutes; the checks below then say what it did).
  for (let i = 0; i < 1_200; i++) {
    const r = lastReport(await readFile(join(out, 'report.json'), 'utf8').catch(() => ''))
    if (r !== undefined && r.reads > files.length && r.lastAt > lastKillAt) break
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  await writeFile(join(out, 'stop'), '')
  const tasks = async (): Promise<string> => (await containerd.ctr('tasks', 'ls')).stdout
  for (let i = 0; i < 300 && /lazy-kill\s+\d+\s+RUNNING/.test(await tasks()); i++) await new Promise(resolve => setTimeout(resolve, 100))
  const report = lastReport(await readFile(join(out, 'report.json'), 'utf8'))
  t.ok(report !== undefined, `the container's reader reported (stderr: ${await readFile(join(out, 'stderr.txt'), 'utf8').catch(() => '')})`)
  t.same(report?.errors, [], 'no read error in the container')
  t.same(report?.wrong, [], 'no wrong byte in the container')
  t.ok((report?.reads ?? 0) > files.length, `the container verified ${report?.reads ?? 0} file reads (${files.length} files a pass)`)
  t.ok((report?.lastAt ?? 0) > lastKillAt, 'it was still reading after the last kill')
  t.equal(new Set(pids).size, KILLS + 1, `a new daemon served after each kill: ${pids.join(' → ')}`)
  const log = await readFile(join(node.home, 'layerd.log'), 'utf8')
  t.notMatch(log, /snapshots\/\d+\/fs: .*mounting it again/, 'no lazy mount was mounted afresh (its connection would have ended)')
  t.equal(await mountsUnder(snapshotsDir), lazyMounts, 'the same lazy mounts stand')
  t.equal(await mountsUnder(imagesDir), baseMounts, 'the base is still mounted (the reader above read through it across the kills)')
  // containerd reaches the new daemon's snapshotter (it listens after the daemon's control socket): a new container starts on the same snapshots.
  const listening = async (): Promise<boolean> => await new Promise(resolve => {
    const c = connect(snapshotterSocketPath(node.home), () => { c.destroy(); resolve(true) })
    c.on('error', () => resolve(false))
  })
  for (let i = 0; i < 300 && !await listening(); i++) await new Promise(resolve => setTimeout(resolve, 100))
  // containerd's proxy plugin reconnects with gRPC's backoff (capped at 3 s) and fails calls fast meanwhile
  // ("connection refused"), even once the socket answers: retry that error alone, for up to 30 s.
  let fresh = await containerd.ctr('run', '--rm', '--snapshotter', 'layerd', 'deb/python:v1', 'lazy-after', 'python3', '-c', 'print(6*7)')
  for (let i = 1; i <= 60 && fresh.code !== 0 && /connection refused/.test(fresh.stderr); i++) {
    await new Promise(resolve => setTimeout(resolve, 500))
    fresh = await containerd.ctr('run', '--rm', '--snapshotter', 'layerd', 'deb/python:v1', `lazy-after-${i}`, 'python3', '-c', 'print(6*7)')
  }
  t.equal(fresh.stdout.trim(), '42', fresh.stderr)
  t.equal((await containerd.ctr('tasks', 'rm', 'lazy-kill')).code, 0)
  t.equal((await containerd.ctr('containers', 'rm', 'lazy-kill')).code, 0)
})
