/**
 * The lazy path under a real containerd 1.6: `layerctl containerd pull` of
 * the Debian python image from layerd's store (no layer downloaded or
 * unpacked), `ctr run` on it reading a few percent of the image, two
 * task images on one base sharing that base's one FUSE mount (as overlay2
 * shares a base layer), containers that keep running across a containerd
 * restart, GC after `ctr image rm` leaving no mount or directory behind, and
 * the pull through layerctl's C front served by layerd (no Node process).
 */
import t from 'tap'
import { existsSync } from 'node:fs'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { ContainerdInstance } from '../../fixtures/containerd.js'
import { LAYERCTL_FRONT, layerdNode, mountsUnder, run as runProcess } from '../../fixtures/layerd-harness.js'
import { dir, file } from '../../fixtures/layer-dsl.js'
import { PROJECT_DIR, writeTaskLayout } from '../../bench/deploy/task-image.js'
import { mountsUnder as hostMountsUnder } from '../host/mount-table.js'
import { parseRef } from '../format/ref.js'
import { loadImage } from '../image/load-image.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { snapshotterSocketPath } from './containerd-snapshotter.js'

const images = await ensureDebianImages()
// Short paths: unix socket names are limited to 104–108 bytes.
const work = await mkdtemp('/tmp/layerd-ctr-')
t.teardown(async () => await rm(work, { recursive: true, force: true }))
const node = layerdNode(join(work, 'node'))
let storedBytes = 0
const TASKS = ['a', 'b']
let tocEntries = 0
{
  const store = openStore(node.store)
  await pushImage(images.images['python-v1'].dockerArchive, parseRef('deb/python:v1'), { store, db: openMemoryNodeDb() })
  const loaded = await loadImage(store, 'deb/python:v1')
  storedBytes = loaded.manifest.layers.reduce((n, l) => n + l.storedBytes, 0)
  tocEntries = loaded.manifest.layers.reduce((n, l) => n + l.entries, 0)
  await pushImage(images.images['python-v2'].dockerArchive, parseRef('deb/python:v2'), { store, db: openMemoryNodeDb() })
  // Two task images on python-v1 (its layers plus one project layer each), as the deploy corpus builds them.
  for (const name of TASKS) {
    const layout = join(work, `layout-${name}`)
    await writeTaskLayout(layout, images.images['python-v1'].ociLayout, { entries: [dir('work'), dir(PROJECT_DIR), file(`${PROJECT_DIR}/task.txt`, `task ${name}\n`)], files: 1, bytes: 0 }, name)
    await pushImage(`oci:${layout}`, parseRef(`deb/task-${name}:v1`), { store, db: openMemoryNodeDb() })
  }
  await store.close()
}
await node.startDaemon()
t.teardown(async () => await node.stopDaemon())
for (let i = 0; i < 100 && !existsSync(snapshotterSocketPath(node.home)); i++) await new Promise(resolve => setTimeout(resolve, 100))
const containerd = await ContainerdInstance.start({ dir: join(work, 'ctd'), snapshotterSocket: snapshotterSocketPath(node.home) })
t.teardown(async () => await containerd.stop())
const run = async (...args: string[]) => await containerd.ctr('run', '--rm', '--snapshotter', 'layerd', ...args)

t.test('layerctl containerd pull, then ctr run: python answers, reading a few percent of the image', async t => {
  const pull = await node.layerctl('containerd', 'pull', 'deb/python:v1', '--address', containerd.address, '--json')
  t.equal(pull.code, 0, pull.stderr)
  const r = JSON.parse(pull.stdout) as { layers: number, remote: number }
  t.equal(r.remote, r.layers, 'every layer prepared through the remote path')
  const ls = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'ls')
  t.equal(ls.stdout.split('\n').filter(l => l.includes('Committed')).length, r.layers, `committed:\n${ls.stdout}`)
  // Usage of a lazy snapshot: its layer as an unpacked one would count it (file bytes and entries from its TOC).
  const usage = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'usage')
  // KEY SIZE INODES, SIZE humanized ("42.6 MiB").
  const rows = usage.stdout.trim().split('\n').slice(1).map(l => /^(\S+)\s+(.+?)\s+(\d+)$/.exec(l.trim()))
  t.equal(rows.length, r.layers, usage.stdout)
  t.ok(rows.every(row => row !== null), usage.stdout)
  t.equal(rows.reduce((n, row) => n + Number(row?.[3]), 0), tocEntries, `inodes sum to the TOCs' ${tocEntries} entries:\n${usage.stdout}`)
  t.ok(rows.every(row => row !== null && !/^0(\.0+)? ?B$/.test(row[2]!)), `every lazy snapshot reports a size:\n${usage.stdout}`)
  let py = await run('deb/python:v1', 'lazy-1', 'python3', '-c', 'print(6*7)')
  if (py.code === 0 && py.stdout.trim() === '') {
    // Seen once in CI at load ~12: exit 0 with nothing printed. ctr 1.6 can lose a short task's output when its
    // FIFO copy has not finished as the task exits; a failed python would exit non-zero. Run it once more.
    t.comment('ctr run exited 0 with no output; running it again')
    py = await run('deb/python:v1', 'lazy-1b', 'python3', '-c', 'print(6*7)')
  }
  t.equal(py.stdout.trim(), '42', py.stderr)
  const stats = JSON.parse((await node.layerctl('stats', '--json')).stdout) as { fetch: { fetchedBytes: number } }
  t.ok(stats.fetch.fetchedBytes > 0, 'chunks were fetched on demand')
  t.ok(stats.fetch.fetchedBytes < 0.15 * storedBytes, `fetched ${stats.fetch.fetchedBytes} bytes = ${(100 * stats.fetch.fetchedBytes / storedBytes).toFixed(1)}% of ${storedBytes} stored (< 15%)`)
  const again = await node.layerctl('containerd', 'pull', 'deb/python:v1', '--address', containerd.address, '--json')
  t.equal(again.code, 0, again.stderr)
  t.equal((JSON.parse(again.stdout) as { alreadyThere: number }).alreadyThere, r.layers, 'a second pull finds every snapshot there')
})

t.test('two task images on one base: each container stands on its own top layer over the same shared base mount, and reads both', async t => {
  const lowers: string[][] = []
  for (const name of TASKS) {
    const pull = await node.layerctl('containerd', 'pull', `deb/task-${name}:v1`, '--address', containerd.address)
    t.equal(pull.code, 0, pull.stderr)
    const id = `task-${name}-1`
    const create = await containerd.ctr('containers', 'create', '--snapshotter', 'layerd', `deb/task-${name}:v1`, id, 'true')
    t.equal(create.code, 0, create.stderr)
    // ctr's container snapshot key is the container's id.
    const mounts = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'mounts', '/tmp/x', id)
    const lowerdir = /lowerdir=(\S+)/.exec(mounts.stdout)?.[1]
    t.ok(lowerdir !== undefined, `an overlay with lower dirs: ${mounts.stdout}`)
    lowers.push((lowerdir ?? '').split(':'))
    t.equal((await containerd.ctr('containers', 'rm', id)).code, 0)
    const py = await run(`deb/task-${name}:v1`, `task-${name}-2`, 'python3', '-c', `print(open('/${PROJECT_DIR}/task.txt').read().strip(), 6*7)`)
    t.equal(py.stdout.trim(), `task ${name} 42`, `python from the base, the project file from the top layer: ${py.stderr}`)
  }
  const [a, b] = lowers as [string[], string[]]
  t.equal(a.length, 2, `two lower dirs, the top layer and the base: ${a.join(':')}`)
  t.not(a[0], b[0], 'each image has its own top layer mount')
  t.equal(a[1], b[1], 'both stand on the same base mount')
  const mounted = await hostMountsUnder(node.home)
  for (const d of [...a, ...b]) t.ok(mounted.includes(d), `${d} is a mount`)
  t.ok(a[1]!.startsWith(join(node.home, 'images', 'base-')), `the base is the node's shared base mount: ${a[1]}`)
  const base = await node.layerctl('stats', a[1]!, '--json')
  t.equal(base.code, 0, `layerctl stats answers for the shared base: ${base.stderr}`)
  const counted = JSON.parse(base.stdout) as { fuseOps?: { reads: number } }
  t.ok((counted.fuseOps?.reads ?? 0) > 0, `python was read through the base: ${base.stdout.slice(0, 300)}`)
  for (const name of TASKS) t.equal((await containerd.ctr('images', 'rm', '--sync', `deb/task-${name}:v1`)).code, 0)
})

t.test('a top layer with a whiteout (python-v2 removes /etc/issue.net) is one merged mount of its chain, and the file is gone', async t => {
  const pull = await node.layerctl('containerd', 'pull', 'deb/python:v2', '--address', containerd.address)
  t.equal(pull.code, 0, pull.stderr)
  t.equal((await containerd.ctr('containers', 'create', '--snapshotter', 'layerd', 'deb/python:v2', 'v2-1', 'true')).code, 0)
  const mounts = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'mounts', '/tmp/x', 'v2-1')
  const lowerdir = /lowerdir=(\S+)/.exec(mounts.stdout)?.[1] ?? ''
  t.equal(lowerdir.split(':').length, 1, `one lower dir, the merged chain: ${mounts.stdout}`)
  t.equal((await containerd.ctr('containers', 'rm', 'v2-1')).code, 0)
  const py = await run('deb/python:v2', 'v2-2', 'python3', '-c', 'import os; print(os.path.exists("/etc/issue.net"), os.path.exists("/etc/issue"))')
  t.equal(py.stdout.trim(), 'False True', py.stderr)
  t.equal((await containerd.ctr('images', 'rm', '--sync', 'deb/python:v2')).code, 0)
})

t.test('layerctl containerd pull through the C front is served by layerd\'s runner: no Node CLI runs, and the image starts', async t => {
  // No node to exec: a pull the front handed to the Node CLI would fail with "cannot run the Node CLI".
  const env = { ...node.env, PATH: '/nonexistent', LAYERCTL_NODE: '/nonexistent/node', CONTAINERD_ADDRESS: containerd.address }
  const pull = await runProcess(LAYERCTL_FRONT, ['containerd', 'pull', 'deb/task-a:v1', '--json'], env)
  t.equal(pull.code, 0, pull.stderr)
  const r = JSON.parse(pull.stdout) as { name: string, layers: number, remote: number }
  t.equal(r.name, 'deb/task-a:v1', 'the address came from the caller\'s CONTAINERD_ADDRESS')
  t.equal(r.remote + (r as unknown as { alreadyThere: number }).alreadyThere, r.layers, 'every layer a remote snapshot')
  const py = await run('deb/task-a:v1', 'front-1', 'python3', '-c', `print(open('/${PROJECT_DIR}/task.txt').read().strip())`)
  t.equal(py.stdout.trim(), 'task a', py.stderr)
  const registry = await runProcess(LAYERCTL_FRONT, ['containerd', 'pull', 'docker://127.0.0.1:9/a/b:1'], env)
  t.equal(registry.code, 125, 'a docker:// pull is the Node CLI\'s (it needs the caller\'s credentials)')
  t.match(registry.stderr, /cannot run the Node CLI/)
  t.equal((await containerd.ctr('images', 'rm', '--sync', 'deb/task-a:v1')).code, 0)
})

t.test('layerctl containerd pull of an image layerd does not have fails, naming it', async t => {
  const pull = await node.layerctl('containerd', 'pull', 'deb/none:v1', '--address', containerd.address)
  t.equal(pull.code, 1)
  t.match(pull.stderr, /deb\/none:v1/)
})

t.test('layerctl containerd pull with a namespace containerd would refuse fails, naming it, before containerd is asked', async t => {
  const pull = await node.layerctl('containerd', 'pull', 'deb/python:v1', '--address', containerd.address, '--namespace', 'not a namespace')
  t.equal(pull.code, 1)
  t.match(pull.stderr, /namespace "not a namespace" is not a containerd namespace/)
})

t.test('containerd restarted while a container runs: it keeps running, and new ones start', async t => {
  const start = await containerd.ctr('run', '-d', '--snapshotter', 'layerd', 'deb/python:v1', 'long-1', 'sleep', '600')
  t.equal(start.code, 0, start.stderr)
  await containerd.restart()
  const tasks = await containerd.ctr('tasks', 'ls')
  t.match(tasks.stdout, /long-1\s+\d+\s+RUNNING/, tasks.stdout)
  const exec = await containerd.ctr('tasks', 'exec', '--exec-id', 'e1', 'long-1', 'python3', '-c', 'print(6*7)')
  t.equal(exec.stdout.trim(), '42', `the running container still reads its image: ${exec.stderr}`)
  const fresh = await run('deb/python:v1', 'lazy-2', 'python3', '-c', 'print(6*7)')
  t.equal(fresh.stdout.trim(), '42', fresh.stderr)
  await containerd.ctr('tasks', 'kill', '-s', 'SIGKILL', 'long-1')
  for (let i = 0; i < 50 && !/STOPPED/.test((await containerd.ctr('tasks', 'ls')).stdout); i++) await new Promise(resolve => setTimeout(resolve, 100))
  t.equal((await containerd.ctr('tasks', 'rm', 'long-1')).code, 0)
  t.equal((await containerd.ctr('containers', 'rm', 'long-1')).code, 0)
})

t.test('containerd\'s GC after ctr image rm unmounts and removes every remote snapshot', async t => {
  const snapshotsDir = join(node.home, 'snapshotter', 'snapshots')
  t.ok(await mountsUnder(snapshotsDir) > 0, 'remote snapshots are mounted while in use')
  const rmi = await containerd.ctr('images', 'rm', '--sync', 'deb/python:v1')
  t.equal(rmi.code, 0, rmi.stderr)
  const ls = await containerd.ctr('snapshots', '--snapshotter', 'layerd', 'ls')
  t.equal(ls.stdout.trim().split('\n').length, 1, ls.stdout)
  t.same(await readdir(snapshotsDir), [], 'no snapshot directory left')
  t.equal(await mountsUnder(snapshotsDir), 0, 'no mount left')
  t.equal(await mountsUnder(join(node.home, 'images')), 0, 'no shared base mount left')
})
