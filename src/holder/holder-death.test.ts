/**
 * Issue 33, holder death: `kill -9` of the holder while layerd serves a
 * mount. layerd starts a new holder and hands it the mount's FUSE fd; the
 * new holder shows in `layerctl daemon status --json` (`holder.pid`), keeps
 * a warm standby again, protects the mount against a layerd crash (a
 * `kill -9` of layerd right after: the mount keeps reading, served by a new
 * layerd), and `layerctl daemon restart` works again. Twice in a row, so
 * the rescue holder can itself be replaced. With LAYERD_HOLDER_RESCUE=0 the
 * old behaviour shows: no holder answers, and restart refuses.
 */
import t, { type Test } from 'tap'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { loadavg } from 'node:os'
import { join } from 'node:path'
import { layerdNode, type LayerdNode } from '../../fixtures/layerd-harness.js'

const dir = t.testdir()

interface Status { daemon: { pid: number, connectionsKeptBy: string | null }, holder: { pid: number, keptFds: number, standbyPid: number | null } | null }

async function ok (node: LayerdNode, ...args: string[]): Promise<string> {
  const r = await node.layerctl(...args)
  if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')}: exit ${r.code}: ${r.stderr}`)
  return r.stdout
}

async function status (node: LayerdNode): Promise<Status> {
  return JSON.parse(await ok(node, 'daemon', 'status', '--json')) as Status
}

/** Poll `check` every 50 ms until it returns a value, or fail naming `what`. Async. */
async function until<T> (what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await check().catch(() => undefined)
    if (v !== undefined) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

/** A node with one small image mounted at `<home>/mnt`, started as layerctl starts it (under a holder). */
async function mountedNode (t: Test, name: string, env: NodeJS.ProcessEnv = {}): Promise<{ node: LayerdNode, file: string }> {
  const root = join(dir, name)
  const node = layerdNode(join(root, 'home'), { env })
  t.teardown(async () => { await node.layerctl('umount', join(node.home, 'mnt')); await node.stopDaemon() })
  await mkdir(join(root, 'img', 'etc'), { recursive: true })
  await writeFile(join(root, 'img', 'etc', 'hello'), `hello from ${name}\n`)
  await ok(node, 'push', join(root, 'img'), `${name}/img:v1`)
  await mkdir(join(node.home, 'mnt'), { recursive: true })
  await ok(node, 'mount', `${name}/img:v1`, join(node.home, 'mnt'))
  return { node, file: join(node.home, 'mnt', 'etc', 'hello') }
}

t.test('kill -9 of the holder: layerd hands its FUSE fds to a new holder, which protects the mount again', async t => {
  const { node, file } = await mountedNode(t, 'rescue')
  const expected = await readFile(file, 'utf8')
  for (let round = 1; round <= 2; round++) {
    const before = await until('a warm standby runs', async () => { const s = await status(node); return s.holder?.standbyPid != null ? s : undefined })
    const daemonPid = before.daemon.pid
    const killedAt = Date.now()
    await node.killHolder()
    const after = await until('a new holder keeps the connection', async () => {
      const s = await status(node)
      return s.holder !== null && s.holder.pid !== before.holder!.pid && s.holder.keptFds === 1 ? s : undefined
    })
    const at = (re: RegExp): number => { const m = [...log.matchAll(re)].at(-1); return m === undefined ? NaN : Date.parse(m[1]!) }
    const log = await readFile(join(node.home, 'layerd.log'), 'utf8')
    t.comment(`round ${round}: the fd was in the new holder's socket ${at(/^(\S+) the holder is gone .*handed to a new holder$/gm) - killedAt} ms after the kill, ` +
      `the new holder served it ${at(/^(\S+) holder \d+: took over layerd/gm) - killedAt} ms after (its Node boot), ` +
      `status answered ${Date.now() - killedAt} ms after (two layerctl runs; load ${loadavg()[0]!.toFixed(1)})`)
    t.equal(after.daemon.pid, daemonPid, 'the same layerd serves on')
    t.equal(after.daemon.connectionsKeptBy, 'holder', 'layerd says its connections are kept')
    t.equal(Number((await readFile(join(node.home, 'holder.pid'), 'utf8')).trim()), after.holder!.pid, 'holder.pid names the new holder')
    t.equal(await readFile(file, 'utf8'), expected, 'the mount reads')
    t.match(log, /1 FUSE connection\(s\) handed to a new holder/, 'layerd logs the hand-over')

    // Crash protection is back: a layerd crash now is taken over, not the end of the mount.
    await until('the new holder keeps a warm standby', async () => (await status(node)).holder?.standbyPid ?? undefined)
    await node.killDaemon()
    const served = await until('a new layerd serves', async () => { const s = await status(node); return s.daemon.pid !== daemonPid ? s : undefined })
    t.equal(served.holder?.pid, after.holder!.pid, 'the new holder restarted layerd')
    t.equal(await readFile(file, 'utf8'), expected, 'the mount reads after the layerd crash')
  }
  const restart = JSON.parse(await ok(node, 'daemon', 'restart', '--json')) as { newPid: number }
  t.equal((await status(node)).daemon.pid, restart.newPid, '`layerctl daemon restart` works again')
  t.equal(await readFile(file, 'utf8'), expected, 'the mount reads after the restart')
})

t.test('with LAYERD_HOLDER_RESCUE=0, a layerd whose holder died serves on unprotected', async t => {
  const { node, file } = await mountedNode(t, 'norescue', { LAYERD_HOLDER_RESCUE: '0' })
  await node.killHolder()
  const s = await until('layerd hears its holder die', async () => { const x = await status(node); return x.daemon.connectionsKeptBy === null ? x : undefined })
  t.equal(s.holder, null, 'no holder answers')
  const r = await node.layerctl('daemon', 'restart')
  t.not(r.code, 0, 'restart refuses')
  t.match(r.stderr, /no layerd holder runs/, r.stderr.trim())
  t.equal(await readFile(file, 'utf8'), 'hello from norescue\n', 'the mount still reads')
})
