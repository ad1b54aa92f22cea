/**
 * The takeover tests' shared workload (crash, upgrade): on one attack node
 * (src/attacks/attack-harness.ts, layerd started under its holder), 16
 * verifying readers on the host over a plain `layerctl mount` of the python
 * image, and process and container sandboxes (on the image's stack: base
 * and top FUSE mounts plus overlay) running the same reader inside. While
 * they read, `disrupt` runs `rounds` times, each time once a new daemon
 * serves and the readers have read through it for a while.
 *
 * May import: src/, fixtures/, tap (types), node built-ins.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import type { Test } from 'tap'
import { Writable } from 'node:stream'
import { writeFile } from 'node:fs/promises'
import { VERIFYING_READER_PY, expectedFiles, lastReport, readerLists, type ReaderReport, type ReaderSpec } from '../../fixtures/verifying-readers.js'
import { sh, startAttackNode, tierUnavailableReason, type AttackNode } from '../attacks/attack-harness.js'
import { ControlClient } from '../daemon/control-client.js'
import { socketPath } from '../daemon/control-protocol.js'
import type { Tier } from '../runtime/sandbox.js'

export const HOST_READERS = 16
export const FILES_PER_READER = 24
/** Sandboxes reading through the image's stack: two per Linux tier. */
export const SANDBOX_TIERS: readonly Tier[] = ['process', 'process', 'container', 'container']
/** Reads go on against each new daemon this long before the next disruption. */
export const READ_THROUGH_MS = 1_200

export interface WorkloadResult {
  host: ReaderReport[]
  sandboxes: Array<{ tier: Tier, report: ReaderReport }>
  /** The daemon pid before the first disruption and after each. */
  pids: number[]
  /** performance.now() → epoch seconds of the last disruption. */
  lastDisruptionAt: number
}

/** The pid of the daemon answering `home`'s control socket, once it differs from `not`. Async; throws after `timeoutMs`. */
export async function servingPid (home: string, not: number | undefined, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      const c = await ControlClient.connect(socketPath(home), 500)
      try {
        const { pid } = await c.call<{ pid: number }>('ping')
        if (pid !== not) return pid
      } finally { c.close() }
    } catch {}
    if (Date.now() > deadline) throw new Error(`no new layerd served ${home} within ${timeoutMs} ms`)
    await new Promise(resolve => setTimeout(resolve, 25))
  }
}

/** Start a host reader (python3) over `spec`. */
function hostReader (spec: ReaderSpec): Promise<ReaderReport> {
  return new Promise((resolve, reject) => {
    const child = spawn('python3', ['-c', VERIFYING_READER_PY], { stdio: ['pipe', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (c: Buffer) => { out += c.toString() })
    child.stderr.on('data', (c: Buffer) => { err += c.toString() })
    child.on('error', reject)
    child.on('close', code => {
      const report = lastReport(out)
      if (report !== undefined) resolve(report); else reject(new Error(`reader exited ${code}: ${err.slice(0, 2000)}`))
    })
    child.stdin.end(JSON.stringify(spec))
  })
}

/**
 * The workload on a fresh node in `dir` (short: layerd's socket path must fit in 108 bytes): mounts, sandboxes, readers for `durationS`,
 * `rounds` disruptions (all within `maxDurationS`, the sandbox readers' deadline). Async; the node is stopped at `t`'s end.
 */
export async function readThroughDisruptions (t: Test, dir: string, rounds: number, maxDurationS: number, disrupt: (round: number, node: AttackNode) => Promise<void>): Promise<WorkloadResult & { node: AttackNode }> {
  const node = await startAttackNode(t, 'node', { dir })
  const mnt = join(node.home, 'mnt')
  const m = await node.layerd.layerctl('mount', 'deb/python:v1', mnt)
  t.equal(m.code, 0, `plain mount: ${m.stderr}`)
  const files = await expectedFiles(node.fixtureRootfs)
  const lists = readerLists(files, HOST_READERS + SANDBOX_TIERS.length, FILES_PER_READER)
  const tiers: Tier[] = []
  for (const tier of SANDBOX_TIERS) if (await tierUnavailableReason(tier) === undefined) tiers.push(tier)
  const sandboxes = await Promise.all(tiers.map(async tier => await node.sandbox(t, tier)))
  for (const sb of sandboxes) t.equal((await sh(sb, 'true')).exitCode, 0, 'the sandbox runs')
  const stopFile = join(node.home, 'readers-stop')
  // Sandbox readers cannot see the stop file: they stream their reports and are killed with their sandbox at the end.
  const until = Date.now() / 1000 + maxDurationS
  const host = lists.slice(0, HOST_READERS).map(files => hostReader({ root: mnt, files, until, stopFile }))
  const streams = sandboxes.map(() => ({ out: '' }))
  const inside = sandboxes.map((sb, i) => {
    const sink = new Writable({ write (c: Buffer, _e, done) { streams[i]!.out = (streams[i]!.out + c.toString()).slice(-1_000_000); done() } })
    return sb.exec({ cmd: ['python3', '-c', VERIFYING_READER_PY], stdin: Buffer.from(JSON.stringify({ root: '', files: lists[HOST_READERS + i]!, until })), stdout: sink, timeoutMs: (maxDurationS + 30) * 1000 })
      .catch(() => undefined)
  })
  const pids = [await servingPid(node.home, undefined)]
  const roundMs: number[] = []
  let lastDisruptionAt = 0
  for (let round = 0; round < rounds; round++) {
    await new Promise(resolve => setTimeout(resolve, READ_THROUGH_MS))
    lastDisruptionAt = Date.now() / 1000
    const started = performance.now()
    await disrupt(round, node)
    pids.push(await servingPid(node.home, pids.at(-1)))
    roundMs.push(Math.round(performance.now() - started))
  }
  await new Promise(resolve => setTimeout(resolve, READ_THROUGH_MS))
  await writeFile(stopFile, '')
  const hostReports = await Promise.all(host)
  const sandboxReports = sandboxes.map((_, i) => {
    const report = lastReport(streams[i]!.out)
    if (report === undefined) throw new Error(`sandbox reader ${i} reported nothing: ${streams[i]!.out.slice(-2000)}`)
    return { tier: tiers[i]!, report }
  })
  t.comment(`disruption → new daemon serving, ms: ${roundMs.join(' ')}`)
  void inside // they end when their sandboxes are destroyed (t's teardown)
  return { node, host: hostReports, sandboxes: sandboxReports, pids, lastDisruptionAt }
}

/** The assertions both tests make on a workload's result. */
export function assertNothingNoticed (t: Test, r: WorkloadResult, rounds: number): void {
  const all = [...r.host.map((report, i) => ({ who: `host reader ${i}`, report })), ...r.sandboxes.map((s, i) => ({ who: `${s.tier} sandbox ${i}`, report: s.report }))]
  const errors = all.flatMap(a => a.report.errors.map(e => `${a.who}: ${e}`))
  const wrong = all.flatMap(a => a.report.wrong.map(w => `${a.who}: ${w}`))
  t.same(errors, [], 'zero read errors')
  t.same(wrong, [], 'zero wrong bytes (every read matched its sha256)')
  const reads = all.reduce((n, a) => n + a.report.reads, 0)
  t.ok(all.every(a => a.report.reads > 0), `every reader read (${reads} verified file reads, ${Math.round(all.reduce((n, a) => n + a.report.bytes, 0) / 2 ** 20)} MiB)`)
  t.ok(all.every(a => a.report.lastAt > r.lastDisruptionAt), 'every reader was still reading after the last disruption')
  t.equal(new Set(r.pids).size, rounds + 1, `a new daemon pid served each time: ${r.pids.join(' → ')}`)
  t.equal(r.sandboxes.length, SANDBOX_TIERS.length, `${r.sandboxes.length} sandboxes read through it`)
  const worst = Math.max(...all.map(a => a.report.maxFileS))
  t.comment(`longest single file read: ${worst.toFixed(2)} s`)
}
