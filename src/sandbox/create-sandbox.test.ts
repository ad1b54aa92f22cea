/**
 * Issue 4 on the real path: the Debian python image in the store, the node's
 * layerd mounting it lazily, sandboxes over that FUSE mount; commit, ps, rm
 * and gc through layerctl.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode, mountsUnder } from '../../fixtures/layerd-harness.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { freePort } from '../../fixtures/free-port.js'
import { createRequire } from 'node:module'
import { createSandbox } from './create-sandbox.js'
import type { Tier } from '../runtime/sandbox.js'

const images = await ensureDebianImages()
const work = t.testdir()
const node = layerdNode(join(work, 'home'))
{
  const store = openStore(node.store)
  await pushImage(images.images['python-v1'].dockerArchive, parseRef('deb/python:v1'), { store, db: openMemoryNodeDb() })
  await store.close()
}
const metricsPort = await freePort()
await node.startDaemon(['--metrics-addr', `127.0.0.1:${metricsPort}`])
t.teardown(() => node.stopDaemon())
const base = { image: 'deb/python:v1', home: node.home, store: node.store }

for (const tier of ['process', 'container'] as Tier[]) {
  t.test(`createSandbox({ tier: '${tier}' }) runs the image from the lazy mount`, async t => {
    const sb = await createSandbox({ ...base, tier })
    t.teardown(() => sb.destroy())
    const os = await sb.exec({ cmd: ['cat', '/etc/os-release'] })
    t.match(os.stdout.toString(), /Debian GNU\/Linux 12 \(bookworm\)/)
    const py = await sb.exec({ cmd: ['python3', '-c', 'print(2+2)'] })
    t.equal(py.stdout.toString(), '4\n')
    t.equal(py.exitCode, 0)
    const fail = await sb.exec({ cmd: ['sh', '-c', 'echo oops >&2; exit 42'] })
    t.equal(fail.exitCode, 42, 'a non-zero exit code comes back unchanged')
    t.equal(fail.stderr.toString(), 'oops\n')
    const env = await sb.exec({ cmd: ['sh', '-c', 'echo "$PATH"; pwd'] })
    t.match(env.stdout.toString(), /\/usr\/local\/sbin:\/usr\/local\/bin:\/usr\/sbin:\/usr\/bin:\/sbin:\/bin\n\/root\n/, 'the image config (Env, WorkingDir) applies')
  })

  t.test(`a ${tier} sandbox's writes stay in it`, async t => {
    const a = await createSandbox({ ...base, tier })
    t.teardown(() => a.destroy())
    const w = await a.exec({ cmd: ['sh', '-c', 'rm /bin/ls && echo mine > /etc/x && cat /etc/x && test ! -e /bin/ls'] })
    t.equal(w.exitCode, 0, w.stderr.toString())
    const b = await createSandbox({ ...base, tier })
    t.teardown(() => b.destroy())
    const r = await b.exec({ cmd: ['sh', '-c', 'test -x /bin/ls && test ! -e /etc/x && echo clean'] })
    t.equal(r.stdout.toString(), 'clean\n', 'the next sandbox sees the image unchanged')
  })
}

t.test('layerctl commit turns a kept sandbox into a new image that later sandboxes see', async t => {
  const run = await node.layerctl('run', '--keep', '--tier', 'container', 'deb/python:v1', '--', 'sh', '-c', 'echo step-1 > /root/trajectory && rm /etc/motd')
  t.equal(run.code, 0, run.stderr)
  const id = /kept sandbox (sb-[0-9a-f]{12})/.exec(run.stderr)?.[1]
  t.ok(id, 'the kept sandbox id is printed')
  const ps = JSON.parse((await node.layerctl('ps', '--json')).stdout) as Array<{ id: string, status: string }>
  t.equal(ps.find(s => s.id === id)?.status, 'kept')
  const commit = await node.layerctl('commit', id!, 'deb/python:step1', '--json')
  t.equal(commit.code, 0, commit.stderr)
  const result = JSON.parse(commit.stdout)
  t.ok(result.uploadedBytes < 64 * 1024, `only the new layer is uploaded (${result.uploadedBytes} bytes)`)
  const child = await node.layerctl('run', 'deb/python:step1', '--', 'sh', '-c', 'cat /root/trajectory; test -e /etc/motd || echo motd-gone')
  t.equal(child.stdout, 'step-1\nmotd-gone\n', 'a sandbox of the committed tag sees the changes, deletions included')
  const parent = await node.layerctl('run', 'deb/python:v1', '--', 'sh', '-c', 'test -e /etc/motd && test ! -e /root/trajectory && echo untouched')
  t.equal(parent.stdout, 'untouched\n')
  t.equal((await node.layerctl('rm', id!)).code, 0)
  t.notOk((JSON.parse((await node.layerctl('ps', '--json')).stdout) as Array<{ id: string }>).some(s => s.id === id))
})

t.test('images on the same lower layers share one base mount (a stack); a top layer with a whiteout gets one merged mount', async t => {
  const commitOf = async (script: string, tag: string): Promise<void> => {
    const run = await node.layerctl('run', '--keep', '--tier', 'process', 'deb/python:v1', '--', 'sh', '-c', script)
    const id = /kept sandbox (sb-[0-9a-f]{12})/.exec(run.stderr)?.[1]
    t.equal((await node.layerctl('commit', id!, tag)).code, 0)
    await node.layerctl('rm', id!)
  }
  await commitOf('echo a > /root/task', 'deb/task:a')
  await commitOf('echo b > /root/task', 'deb/task:b')
  await commitOf('rm /etc/motd', 'deb/task:gone')
  const a = await createSandbox({ ...base, image: 'deb/task:a', tier: 'container' })
  t.teardown(() => a.destroy())
  const b = await createSandbox({ ...base, image: 'deb/task:b', tier: 'container' })
  t.teardown(() => b.destroy())
  t.equal((await a.exec({ cmd: ['cat', '/root/task'] })).stdout.toString(), 'a\n')
  t.equal((await b.exec({ cmd: ['sh', '-c', 'cat /root/task; python3 -c "print(1)"'] })).stdout.toString(), 'b\n1\n', 'each image sees its own top layer over the shared base')
  const mountTable = async (): Promise<string[][]> => (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').map(l => l.split(' '))
  let table = await mountTable()
  const typeAt = (path: string): string | undefined => table.filter(f => f[4] === path).map(f => f[f.indexOf('-') + 1]).at(-1)
  const shared = join(node.home, 'images')
  t.equal(typeAt(join(shared, a.manifest.slice(7))), 'overlay', 'task:a is a stack')
  t.equal(typeAt(join(shared, b.manifest.slice(7))), 'overlay', 'task:b is a stack')
  const bases = table.filter(f => f[4]?.startsWith(join(shared, 'base-')) === true && f.includes('fuse.layerd'))
  const lowers = new Set(table.filter(f => f[4] === join(shared, a.manifest.slice(7)) || f[4] === join(shared, b.manifest.slice(7)))
    .map(f => /lowerdir=[^:]+:([^,]+)/.exec(f.at(-1) ?? '')?.[1]))
  t.equal(lowers.size, 1, 'both stacks have the same base below them')
  t.ok(bases.some(f => lowers.has(f[4])), 'and it is a layerd FUSE mount')
  const gone = await createSandbox({ ...base, image: 'deb/task:gone', tier: 'container' })
  t.teardown(() => gone.destroy())
  t.equal((await gone.exec({ cmd: ['sh', '-c', 'test -e /etc/motd || echo motd-gone'] })).stdout.toString(), 'motd-gone\n')
  table = await mountTable()
  t.equal(typeAt(join(shared, gone.manifest.slice(7))), 'fuse.layerd', 'a whiteout in the top layer: one merged mount')
})

t.test('a sandbox left by a crashed caller is listed as orphaned and removed by gc', async t => {
  const script = `
    const { createSandbox } = await import(${JSON.stringify(new URL('./create-sandbox.js', import.meta.url).href)})
    const sb = await createSandbox(${JSON.stringify({ ...base, tier: 'process' })})
    console.log(sb.id)
    process.kill(process.pid, 'SIGKILL')`
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (c: Buffer) => { out += c.toString() })
  await new Promise(resolve => child.on('close', resolve))
  const id = out.trim()
  t.match(id, /^sb-[0-9a-f]{12}$/)
  const ps = JSON.parse((await node.layerctl('ps', '--json')).stdout) as Array<{ id: string, status: string }>
  t.equal(ps.find(s => s.id === id)?.status, 'orphaned')
  const gc = await node.layerctl('gc', '--sandboxes', '--json')
  t.same(JSON.parse(gc.stdout).removed, [id])
  t.equal(await mountsUnder(join(node.home, 'sandboxes', id)), 0, 'its mounts are gone')
})

t.test('layerctl run reports a bad tier or image as its own failure (exit 125), not the command\'s', async t => {
  const badTier = await node.layerctl('run', '--tier', 'unikernel', 'deb/python:v1', '--', 'true')
  t.equal(badTier.code, 125)
  t.match(badTier.stderr, /unknown tier "unikernel"/)
  const missing = await node.layerctl('run', 'deb/nope:v1', '--', 'true')
  t.equal(missing.code, 125)
  t.match(missing.stderr, /image deb\/nope:v1 not found/)
})

t.test('createSandbox() reports its duration to the daemon: layerd_sandbox_create_duration_seconds{tier} moves and agrees with stats', async t => {
  const parse = createRequire(import.meta.url)('parse-prometheus-text-format') as (text: string) => Array<{ name: string, type: string, metrics: Array<{ labels?: Record<string, string>, count?: string, sum?: string, buckets?: Record<string, string> }> }>
  const scrape = async (): Promise<{ type: string, count: number, sum: number, buckets: Record<string, string> } | undefined> => {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
    const family = parse(text).find(f => f.name === 'layerd_sandbox_create_duration_seconds')
    // The parser keeps a labelled histogram's buckets but drops its labels, sum and count: read those samples directly.
    const sample = (suffix: string, le?: string): number | undefined => {
      const line = text.split('\n').find(l => l.startsWith(`layerd_sandbox_create_duration_seconds_${suffix}{`) && l.includes('tier="process"') && (le === undefined || l.includes(`le="${le}"`)))
      return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1))
    }
    const count = sample('count')
    if (family === undefined || count === undefined) return undefined
    return { type: family.type, count, sum: sample('sum')!, buckets: { '+Inf': String(sample('bucket', '+Inf')) } }
  }
  const prior = await scrape()
  const before = prior?.count ?? 0
  const t0 = performance.now()
  for (let i = 0; i < 2; i++) await (await createSandbox({ ...base, tier: 'process' })).destroy()
  const wall = (performance.now() - t0) / 1000
  const after = await scrape()
  t.equal(after?.type, 'HISTOGRAM')
  t.equal(after?.count, before + 2, 'two creations observed')
  const stats = JSON.parse((await node.layerctl('stats', '--json')).stdout) as { sandboxCreates: Record<string, { count: number, sumSeconds: number }> }
  t.equal(stats.sandboxCreates.process?.count, after?.count, 'the count agrees with stats')
  t.equal(stats.sandboxCreates.process?.sumSeconds, after?.sum, 'the sum agrees with stats')
  const added = after!.sum - (prior?.sum ?? 0)
  t.ok(added > 0 && added <= wall, `the two observations are real durations (${added.toFixed(3)} s, within the ${wall.toFixed(3)} s the creations and destroys took)`)
  t.equal(Number(after!.buckets['+Inf']), after!.count, 'the +Inf bucket holds every observation')
})

t.test('layerd stops cleanly with sandbox images mounted, leaving no mount behind', async t => {
  await node.stopDaemon()
  t.equal(await mountsUnder(node.home), 0)
})
