/**
 * Issue 19, upgrade: `layerctl daemon restart` hands every FUSE connection
 * from the running layerd to a new one started from another copy of the
 * build (new code from disk), 10 times, alternating between the two
 * copies, while 16 host readers and 4 process and container sandboxes
 * verify what they read with the page cache dropped: zero read errors,
 * zero wrong bytes, a new daemon each time, running the build it was
 * asked to, each of whose kept connections took the tree and table it built
 * while the old one served; containerd's snapshotter socket accepts as soon
 * as each restart returns; the serving daemon is back at the holder's
 * priority and the warm standby runs nicer.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { connect } from 'node:net'
import { cp, mkdir, readdir, readFile, symlink } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { assertNothingNoticed, readThroughDisruptions } from '../../fixtures/takeover-workload.js'
import { DAEMON_ENTRY } from '../daemon/client/daemon-launcher.js'
import { snapshotterSocketPath } from '../snapshotter/snapshotter-paths.js'
import { containerdApiRoot } from '../snapshotter/containerd-api-root.js'

const RESTARTS = 10
/** layerd starts containerd's snapshotter where containerd's API protos are installed. */
const SNAPSHOTTER_RUNS = (() => { try { containerdApiRoot(); return true } catch { return false } })()
const dir = t.testdir()
const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

/** The nice value of a thread (/proc/PID/task/TID/stat, field 19; the comm field may hold spaces). Sync. */
function niceOf (pid: number, tid = pid): number {
  const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])
}

/** Whether a Unix socket accepts a connection now. Async. */
async function connects (path: string): Promise<boolean> {
  return await new Promise(resolve => {
    const c = connect(path)
    c.once('connect', () => { c.destroy(); resolve(true) })
    c.once('error', () => resolve(false))
  })
}

/** A second copy of this build (compiled code, native addon, package.json; node_modules linked): its layerd entry. */
async function copyOfBuild (to: string): Promise<string> {
  await mkdir(to, { recursive: true })
  await cp(join(REPO, 'dist'), join(to, 'dist'), { recursive: true })
  await cp(join(REPO, 'native', 'build', 'Release'), join(to, 'native', 'build', 'Release'), { recursive: true })
  await cp(join(REPO, 'package.json'), join(to, 'package.json'))
  await symlink(join(REPO, 'node_modules'), join(to, 'node_modules'))
  return join(to, 'dist', 'layerd', 'layerd.cjs')
}

t.test('layerctl daemon restart 10 times between two copies of the build mid-read: zero read errors, zero wrong bytes', async t => {
  const other = await copyOfBuild(join(dir, 'build-b'))
  const entries: string[] = []
  const r = await readThroughDisruptions(t, dir, RESTARTS, 300, async (round, node) => {
    const entry = round % 2 === 0 ? other : DAEMON_ENTRY
    const res = await node.layerd.layerctl('daemon', 'restart', '--entry', entry, '--json')
    t.equal(res.code, 0, `restart ${round + 1}: ${res.stdout.trim()} ${res.stderr}`)
    // The new layerd says it serves only once its services listen: ctr is never refused after a restart.
    if (SNAPSHOTTER_RUNS) t.ok(await connects(snapshotterSocketPath(node.layerd.home)), `restart ${round + 1}: containerd's snapshotter socket accepts as soon as the restart returns`)
    entries.push(entry)
    return (JSON.parse(res.stdout) as { newPid: number }).newPid
  })
  assertNothingNoticed(t, r, RESTARTS)
  const cmdline = (await readFile(`/proc/${r.pids.at(-1)}/cmdline`, 'utf8')).split('\0')
  t.equal(cmdline.find(arg => arg.endsWith('layerd.cjs')), entries.at(-1), 'the last daemon runs the build it was restarted from (node flags come first)')
  const log = await readFile(join(r.node.home, 'layerd.log'), 'utf8')
  t.equal(log.match(/exited with code 6 \(handover\)/g)?.length, RESTARTS, 'each old layerd handed over (exit 6)')
  t.equal(log.match(/was killed by|fatal/g), null, 'no layerd crashed')
  // Each new layerd built the kept connections' trees and tables while the old one served (src/daemon/mounts/prepared-takeovers.ts), and took them over with those.
  const ahead = [...log.matchAll(/used the trees and tables of (\d+) of (\d+) connection\(s\), built ahead/g)].map(m => [Number(m[1]), Number(m[2])])
  t.equal(ahead.length, RESTARTS, 'each new layerd says what it built ahead')
  t.ok(ahead.every(([used, built]) => used === built && used! >= 3), `… and used it for every kept connection, the plain mount and the stack's base and top: ${JSON.stringify(ahead)}`)
  const status = await r.node.layerd.layerctl('daemon', 'status', '--json')
  const s = JSON.parse(status.stdout) as { daemon: { pid: number }, holder: { holderPid: number, keptFds: number, restarts: number, plannedRestarts: number, standbyPid?: number | null }, mounts: unknown[] }
  t.equal(s.holder.plannedRestarts, RESTARTS, 'daemon status counts the planned restarts')
  t.equal(s.holder.restarts, 0, '… and no crash restart')
  t.equal(s.daemon.pid, r.pids.at(-1), 'daemon status names the serving daemon')
  t.ok(s.holder.holderPid > 0 && s.holder.keptFds >= 3, `… its holder and the kept connections (${s.holder.keptFds}: plain mount, stack base and top)`)
  t.ok(s.mounts.length >= 2, '… and the mounts')
  // Started niced to prepare while the old one served, the serving layerd is back at the holder's priority on every thread.
  const holderNice = niceOf(s.holder.holderPid)
  const niceThreads = (await readdir(`/proc/${s.daemon.pid}/task`)).map(tid => niceOf(s.daemon.pid, Number(tid)))
  t.ok(niceThreads.length > 1 && niceThreads.every(n => n === holderNice), `every thread of the serving layerd runs at the holder's nice ${holderNice}: ${niceThreads.join(' ')}`)
  // … while the warm standby the holder keeps now (it only loads) runs nicer, so its loading does not slow the serving one's reads.
  let standbyPid: number | null = s.holder.standbyPid ?? null
  for (let tries = 0; standbyPid === null && tries < 600; tries++) {
    await new Promise(resolve => setTimeout(resolve, 100))
    standbyPid = (JSON.parse((await r.node.layerd.layerctl('daemon', 'status', '--json')).stdout) as { holder: { standbyPid: number | null } }).holder.standbyPid
  }
  t.ok(standbyPid !== null, 'the holder keeps a warm standby')
  if (standbyPid !== null) t.equal(niceOf(standbyPid), Math.min(19, holderNice + 10), `the warm standby ${standbyPid} runs at nice ${Math.min(19, holderNice + 10)}`)
})
