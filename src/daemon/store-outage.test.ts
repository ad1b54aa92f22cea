/**
 * The store going away under a real layerd: s3rver (fixtures/s3rver.ts), a
 * real process, killed in the middle of cold reads and started again on the
 * same port and directory. Reads block through an outage shorter than the
 * store deadline and complete when the store is back; past the deadline they
 * fail with EIO and the daemon logs the outage once; either way the mount
 * recovers by itself.
 */
import t, { type Test } from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode, run, type LayerdNode } from '../../fixtures/layerd-harness.js'
import { startS3rver, S3RVER_CREDENTIALS, type S3rverHandle } from '../../fixtures/s3rver.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'

const images = await ensureDebianImages()
const python = images.images['python-v1']
const work = t.testdir()

/** s3rver holding the python image under `name`; `restart()` brings it back on the same port and data. */
async function storeWithImage (t: Test, name: string): Promise<{ s3: S3rverHandle, url: string, env: NodeJS.ProcessEnv, restart: () => Promise<S3rverHandle> }> {
  const dir = join(work, name)
  const s3 = await startS3rver(dir)
  t.teardown(() => s3.stop())
  const env = { AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey, LAYERD_S3_ENDPOINT: s3.endpoint }
  const url = `s3://${s3.bucket}/layerd`
  const store = openStore(url, { s3Endpoint: s3.endpoint })
  await pushImage(python.dockerArchive, parseRef('deb/python:v1'), { store, db: openMemoryNodeDb() })
  await store.close()
  const restart = async (): Promise<S3rverHandle> => {
    const back = await startS3rver(dir, { port: s3.port, bucket: s3.bucket })
    t.teardown(() => back.stop())
    return back
  }
  return { s3, url, env, restart }
}

/** A cold node on `url` with the image mounted; its daemon's log lines are collected in `log`. */
async function mountedNode (t: Test, name: string, url: string, env: NodeJS.ProcessEnv, daemonArgs: string[] = []): Promise<{ node: LayerdNode, mnt: string, log: string[] }> {
  const node = layerdNode(join(work, name), { store: url, env })
  t.teardown(() => node.stopDaemon())
  const child = await node.startDaemon(daemonArgs)
  const log: string[] = []
  let partial = ''
  child.stderr?.on('data', (c: Buffer) => {
    const lines = (partial + c.toString()).split('\n')
    partial = lines.pop() ?? ''
    log.push(...lines)
  })
  const mnt = join(node.home, 'mnt')
  const r = await node.layerctl('mount', 'deb/python:v1', mnt)
  t.equal(r.code, 0, r.stderr)
  return { node, mnt, log }
}

/** A process started now; resolves with its exit code and stderr, and the time it ended. */
function started (cmd: string, args: string[], cwd?: string): { child: ChildProcess, done: Promise<{ code: number | null, stderr: string, endedAt: number }> } {
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], ...(cwd === undefined ? {} : { cwd }) })
  let stderr = ''
  child.stderr?.on('data', (c: Buffer) => { stderr += c.toString() })
  const done = new Promise<{ code: number | null, stderr: string, endedAt: number }>(resolve => {
    child.once('exit', code => resolve({ code, stderr, endedAt: Date.now() }))
  })
  return { child, done }
}

const outageLines = (log: string[]): string[] => log.filter(l => l.includes('is unavailable: reads that need it fail with EIO'))

for (const outageS of [5, 30]) {
  t.test(`a ${outageS} s store outage during a cold full-tree read: no read fails, and blocked reads finish within 2 s of the store's return`, async t => {
    const { s3, url, env, restart } = await storeWithImage(t, `s3-${outageS}`)
    const { mnt, log } = await mountedNode(t, `node-${outageS}`, url, env)
    // A whole-tree read (every file, cold) and one more file read that starts only once the store is gone.
    // (Not tar to /dev/null: GNU tar then skips reading file contents.)
    const walk = started('sh', ['-c', 'find . -type f -print0 | xargs -0 cat > /dev/null', 'walk'], mnt)
    await sleep(300)
    await s3.stop()
    const blocked = started('cat', [join(mnt, 'usr/lib/x86_64-linux-gnu/libcrypto.so.3')])
    await sleep(outageS * 1000)
    t.equal(walk.child.exitCode, null, 'the walk is still blocked on the store, not failed')
    t.equal(blocked.child.exitCode, null, 'the read started during the outage waits')
    await restart()
    const back = Date.now()
    const b = await blocked.done
    t.equal(b.code, 0, `the blocked read completed: ${b.stderr}`)
    const recoveryMs = b.endedAt - back
    t.ok(recoveryMs <= 2_000, `the blocked read finished ${recoveryMs} ms after the store came back`)
    const w = await walk.done
    t.equal(w.code, 0, `the full-tree read had no failed read: ${w.stderr}`)
    t.same(outageLines(log), [], 'no outage logged: the store came back inside the deadline')
    t.comment(`outage ${outageS} s: recovery ${recoveryMs} ms; walk ended ${w.endedAt - back} ms after the store returned`)
  })
}

t.test('past --store-deadline reads fail with EIO, the outage is logged once, and the mount recovers by itself', async t => {
  const { s3, url, env, restart } = await storeWithImage(t, 's3-deadline')
  const { node, mnt, log } = await mountedNode(t, 'node-deadline', url, env, ['--store-deadline', '3s'])
  t.equal((await run('cat', [join(mnt, 'etc/os-release')], process.env)).code, 0, 'reads work while the store is up')
  await s3.stop()
  const files = ['usr/lib/x86_64-linux-gnu/libcrypto.so.3', 'usr/bin/python3.11', 'usr/lib/x86_64-linux-gnu/libssl.so.3']
  const t0 = Date.now()
  const results = await Promise.all(files.map(async f => await run('cat', [join(mnt, f)], process.env)))
  const ms = Date.now() - t0
  for (const r of results) {
    t.not(r.code, 0)
    t.match(r.stderr, /Input\/output error/)
  }
  t.ok(ms >= 3_000 && ms < 40_000, `EIO after ${ms} ms: after the 3 s deadline, not a hang`)
  const lines = outageLines(log)
  t.equal(lines.length, 1, `one log line for the outage, however many reads failed: ${lines.join(' | ')}`)
  t.match(lines[0] ?? '', `store ${url}`, 'it names the store')
  await restart()
  const again = await run('cat', [join(mnt, files[0]!)], process.env)
  t.equal(again.code, 0, 'the same read succeeds once the store is back (the failure was not cached)')
  t.ok(log.some(l => l.includes(`store ${url} answers again after`)), 'the end of the outage is logged')
  const stats = JSON.parse((await node.layerctl('stats', mnt, '--json')).stdout) as Record<string, number>
  t.ok(stats.storeErrors > 0, `${stats.storeErrors} store errors counted`)
})
