/**
 * Sandbox density (issue 17, part 3): N long-lived sandboxes of the Debian
 * python image, held at once. Each one runs `python3 -c 'import json'` (its
 * small working set, read through the shared layerd mount) and then
 * `sleep`, in its own overlay, quota'd loop-mounted ext4, pid and memory
 * cgroup. Filling stops at N, at the first creation error, or when the
 * node's MemAvailable drops below a floor (--min-available, so the bench
 * never drives this shared machine into the OOM killer); it says which.
 *
 *   node dist/bench/density.js [--tier process|container] [--count N] [--concurrency C]
 *     [--min-available SIZE_MIB] [--probes P] [--out DIR]
 *
 * Reports the node memory used (MemTotal − MemAvailable) per sandbox over
 * the empty node (on a shared machine other work moves it too, so the
 * sandboxes' own memory cgroups' charge and their processes' PSS are
 * reported beside it), layerd's RSS and PSS, this process's RSS (the holder of
 * the sandboxes: its child processes' pipes), the mounts, loop devices and
 * fds in use, layerd's control round trip (ping) while filling and when
 * full, and the creation p99: while filling (create, then the held
 * command up to "ready") and, once full, of P more create → exec true →
 * destroy cycles, each step timed. Writes <out>/density.json
 * ({ tier, count, memoryBytesPerSandbox, layerdRssBytes, createP99Ms,
 * errors, … }) and density.md.
 *
 * Bench-only: may import anything.
 */
import { readdir, readFile, mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { layerdNode } from '../fixtures/layerd-harness.js'
import { connectDaemon } from '../src/daemon/client/daemon-launcher.js'
import { createSandbox, type ManagedSandbox } from '../src/sandbox/create-sandbox.js'
import type { ExecResult, Tier } from '../src/runtime/sandbox.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { fmt, markdownTable, quantile, MIB, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'

const SPEC = {
  tier: { type: 'string', default: 'process', value: 'process|container' },
  count: { type: 'string', default: '2400', value: 'N' },
  concurrency: { type: 'string', default: '4', value: 'C' },
  'min-available': { type: 'string', default: '2048', value: 'MIB' },
  probes: { type: 'string', default: '20', value: 'P' },
  ...REPORT_OPTIONS
} satisfies BenchOptions

const IMAGE = 'bench/python:v1'
const HOLD = 'python3 -c "import json" && echo ready && exec sleep 86400'

interface Held { sb: ManagedSandbox, running: Promise<ExecResult> }

async function meminfo (): Promise<{ usedBytes: number, availableBytes: number }> {
  const text = await readFile('/proc/meminfo', 'utf8')
  const kib = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN) * 1024
  return { usedBytes: kib('MemTotal') - kib('MemAvailable'), availableBytes: kib('MemAvailable') }
}

/** RSS and PSS of a process, bytes (smaps_rollup). */
async function processMemory (pid: number | undefined): Promise<{ rssBytes: number, pssBytes: number }> {
  const text = await readFile(`/proc/${pid ?? 'self'}/smaps_rollup`, 'utf8').catch(() => '')
  const kib = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN) * 1024
  return { rssBytes: kib('Rss'), pssBytes: kib('Pss') }
}

/** What the held sandboxes' own cgroups are charged (memory.usage_in_bytes: their processes' pages, page cache they first touched), and their processes' summed PSS. */
async function sandboxMemory (held: Held[]): Promise<{ cgroupBytes: number, pssBytes: number, processes: number }> {
  let cgroupBytes = 0
  let pssBytes = 0
  let processes = 0
  for (const h of held) {
    const dir = join('/sys/fs/cgroup/memory/layerd', h.sb.id)
    cgroupBytes += Number(await readFile(join(dir, 'memory.usage_in_bytes'), 'utf8').catch(() => '0'))
    for (const pid of (await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => '')).split('\n').filter(l => l !== '')) {
      processes++
      const p = await processMemory(Number(pid))
      if (Number.isFinite(p.pssBytes)) pssBytes += p.pssBytes
    }
  }
  return { cgroupBytes, pssBytes, processes }
}

interface Census { mounts: number, loops: number, layerdFds: number, ownFds: number, processes: number }

async function census (home: string, layerdPid: number | undefined): Promise<Census> {
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter(l => l.split(' ')[4]?.startsWith(home) === true).length
  let loops = 0
  for (const d of await readdir('/sys/block').catch(() => [] as string[])) {
    if (!d.startsWith('loop')) continue
    const back = await readFile(`/sys/block/${d}/loop/backing_file`, 'utf8').catch(() => '')
    if (back.startsWith(home)) loops++
  }
  const fds = async (pid: number | string | undefined): Promise<number> => (await readdir(`/proc/${pid ?? 'self'}/fd`).catch(() => [])).length
  const processes = (await readdir('/proc')).filter(n => /^\d+$/.test(n)).length
  return { mounts, loops, layerdFds: await fds(layerdPid), ownFds: await fds('self'), processes }
}

/** Resolves when the held command prints "ready" (its working set is read), rejects if it ends first. */
function readyWatcher (): { stream: Writable, ready: Promise<void>, failed: (why: string) => void } {
  let resolve!: () => void
  let reject!: (e: Error) => void
  const ready = new Promise<void>((res, rej) => { resolve = res; reject = rej })
  let seen = ''
  const stream = new Writable({
    write (chunk: Buffer, _enc, done) {
      seen = (seen + chunk.toString()).slice(-64)
      if (seen.includes('ready')) resolve()
      done()
    }
  })
  return { stream, ready, failed: why => reject(new Error(why)) }
}

async function main (): Promise<void> {
  const a = benchArgs('density', SPEC)
  const tier = a.choice<Tier>('tier', ['process', 'container'])
  const count = a.number('count', { min: 1 })
  const concurrency = a.number('concurrency', { min: 1 })
  const minAvailableBytes = a.number('min-available', { min: 0 }) * MIB
  const probes = a.number('probes', { min: 0 })
  const command = `node dist/bench/density.js ${process.argv.slice(2).join(' ')}`.trim()
  const images = await ensureDebianImages()
  const work = await mkdtemp('/var/tmp/layerd-density-')
  const node = layerdNode(join(work, 'home'))
  const held: Held[] = []
  try {
    await node.startDaemon()
    for (const args of [['push', images.images['python-v1'].dockerArchive, IMAGE], ['pull', '--all', IMAGE]]) {
      const r = await node.layerctl(...args)
      if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')}: ${r.stderr}`)
    }
    const layerdPid = await node.daemonPid()
    const base = { image: IMAGE, home: node.home, store: node.store, tier }
    const daemon = await connectDaemon({ home: node.home })
    const pingMs = async (): Promise<number> => { const t0 = performance.now(); await daemon.call('ping', {}); return performance.now() - t0 }

    const hold = async (): Promise<Held> => {
      const sb = await createSandbox(base)
      const w = readyWatcher()
      const running = sb.exec({ cmd: ['sh', '-c', HOLD], stdout: w.stream })
      running.then(r => w.failed(`the held command ended early (exit ${r.exitCode}): ${r.stderr.toString().slice(0, 300)}`), err => w.failed((err as Error).message))
      const h = { sb, running }
      held.push(h)
      await w.ready
      return h
    }
    // Warm: the image mounted, the disk template made, python's working set cached.
    for (let i = 0; i < 2; i++) {
      const sb = await createSandbox(base)
      await sb.exec({ cmd: ['sh', '-c', 'python3 -c "import json"'] })
      await sb.destroy()
    }
    await new Promise(resolve => setTimeout(resolve, 2000))
    const empty = { mem: await meminfo(), layerd: await processMemory(layerdPid), own: await processMemory(undefined), census: await census(node.home, layerdPid) }
    process.stderr.write(`empty node: ${fmt(empty.mem.usedBytes / MIB, 0)} MiB used, ${fmt(empty.mem.availableBytes / MIB, 0)} MiB available, layerd RSS ${fmt(empty.layerd.rssBytes / MIB, 0)} MiB\n`)

    const load = startLoadSampler()
    const createMs: number[] = []
    const fillPingMs: number[] = []
    let errors = 0
    let firstError: string | undefined
    let stoppedBy = 'count'
    let started = 0
    let filled = 0
    let reported = 0
    const fillStart = performance.now()
    const stop = (why: string): void => { if (stoppedBy === 'count') stoppedBy = why; started = count }
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (started < count) {
        started++
        const t0 = performance.now()
        try {
          await hold()
          createMs.push(performance.now() - t0)
          filled++
        } catch (err) {
          errors++
          firstError ??= (err as Error).message
          stop(`error: ${(err as Error).message.slice(0, 200)}`)
        }
        if (filled % 50 === 0 && filled > reported) {
          reported = filled
          fillPingMs.push(await pingMs())
          const m = await meminfo()
          process.stderr.write(`  ${filled} held: ${fmt((m.usedBytes - empty.mem.usedBytes) / filled / MIB, 2)} MiB each, ${fmt(m.availableBytes / MIB, 0)} MiB available, ping ${fmt(fillPingMs[fillPingMs.length - 1]!, 1)} ms\n`)
          if (m.availableBytes < minAvailableBytes) stop(`MemAvailable below ${fmt(minAvailableBytes / MIB, 0)} MiB`)
        }
      }
    }))
    const fillSeconds = (performance.now() - fillStart) / 1000
    await new Promise(resolve => setTimeout(resolve, 3000)) // let the last ones' start-up garbage go
    const full = { mem: await meminfo(), layerd: await processMemory(layerdPid), own: await processMemory(undefined), census: await census(node.home, layerdPid) }
    const n = held.length
    const own = await sandboxMemory(held)
    // Once full: more cycles and pings, to see whether a full node still creates and answers.
    const fullCreateMs: number[] = []
    const fullExecMs: number[] = []
    const fullDestroyMs: number[] = []
    const fullPingMs: number[] = []
    for (let i = 0; i < probes; i++) {
      fullPingMs.push(await pingMs())
      const t0 = performance.now()
      try {
        const sb = await createSandbox(base)
        fullCreateMs.push(performance.now() - t0)
        const t1 = performance.now()
        const r = await sb.exec({ cmd: ['true'] })
        fullExecMs.push(performance.now() - t1)
        if (r.exitCode !== 0) throw new Error(`exec true exited ${r.exitCode}`)
        const t2 = performance.now()
        await sb.destroy()
        fullDestroyMs.push(performance.now() - t2)
      } catch (err) { errors++; firstError ??= (err as Error).message }
    }
    daemon.close()
    createMs.sort((x, y) => x - y)
    fullCreateMs.sort((x, y) => x - y)
    const pings = [...fillPingMs, ...fullPingMs].sort((x, y) => x - y)
    const memoryBytesPerSandbox = (full.mem.usedBytes - empty.mem.usedBytes) / n
    const row = (what: string, v: string): string[] => [what, v]
    const table = markdownTable(['measure', 'value'], [
      row('sandboxes held', `${n} of ${count} (stopped by: ${stoppedBy})`),
      row('fill time', `${fmt(fillSeconds, 1)} s (${fmt(n / fillSeconds, 1)} held sandboxes/s at C = ${concurrency})`),
      row('node memory per sandbox (MemTotal − MemAvailable)', `${fmt(memoryBytesPerSandbox / MIB, 2)} MiB`),
      row('charged to the sandboxes\' memory cgroups, per sandbox', `${fmt(own.cgroupBytes / n / MIB, 2)} MiB`),
      row('PSS of the sandboxes\' processes, per sandbox', `${fmt(own.pssBytes / n / MIB, 2)} MiB (${fmt(own.processes / n, 1)} processes each)`),
      row('node memory used, empty → full', `${fmt(empty.mem.usedBytes / MIB, 0)} → ${fmt(full.mem.usedBytes / MIB, 0)} MiB (available ${fmt(full.mem.availableBytes / MIB, 0)} MiB)`),
      row('layerd RSS / PSS, empty → full', `${fmt(empty.layerd.rssBytes / MIB, 0)} / ${fmt(empty.layerd.pssBytes / MIB, 0)} → ${fmt(full.layerd.rssBytes / MIB, 0)} / ${fmt(full.layerd.pssBytes / MIB, 0)} MiB`),
      row('holder (this process) RSS, empty → full', `${fmt(empty.own.rssBytes / MIB, 0)} → ${fmt(full.own.rssBytes / MIB, 0)} MiB`),
      row('mounts under the home, empty → full', `${empty.census.mounts} → ${full.census.mounts}`),
      row('loop devices, empty → full', `${empty.census.loops} → ${full.census.loops}`),
      row('fds: layerd, holder', `${empty.census.layerdFds} → ${full.census.layerdFds}; ${empty.census.ownFds} → ${full.census.ownFds}`),
      row('processes on the node', `${empty.census.processes} → ${full.census.processes}`),
      row('create p50 / p99 while filling', `${fmt(quantile(createMs, 0.5), 0)} / ${fmt(quantile(createMs, 0.99), 0)} ms`),
      row(`create p50 / p99 when full (${fullCreateMs.length} cycles)`, `${fmt(quantile(fullCreateMs, 0.5), 0)} / ${fmt(quantile(fullCreateMs, 0.99), 0)} ms`),
      row('their `exec true`, destroy: p50 / p99 when full', `${fmt(quantile(fullExecMs, 0.5), 0)} / ${fmt(quantile(fullExecMs, 0.99), 0)} ms; ${fmt(quantile(fullDestroyMs, 0.5), 0)} / ${fmt(quantile(fullDestroyMs, 0.99), 0)} ms`),
      row('layerd ping p99 / max (filling and full)', `${fmt(quantile(pings, 0.99), 1)} / ${fmt(pings[pings.length - 1] ?? NaN, 1)} ms`),
      row('errors', `${errors}${firstError === undefined ? '' : ` (first: ${firstError.slice(0, 200)})`}`)
    ])
    const target = `Target: 2,400 process sandboxes held, layerd answering within 1 s: ${n >= 2400 ? '✓' : '✗'} (${n} held), ` +
      `ping max ${fmt(pings[pings.length - 1] ?? NaN, 0)} ms ${(pings[pings.length - 1] ?? Infinity) < 1000 ? '✓' : '✗'}.`
    // Teardown is part of the run: a full node must also empty.
    const teardownStart = performance.now()
    await teardown(held, concurrency)
    const teardownSeconds = (performance.now() - teardownStart) / 1000
    const after = await census(node.home, layerdPid)
    const data = {
      tier, count: n, requested: count, concurrency, stoppedBy, memoryBytesPerSandbox,
      cgroupBytesPerSandbox: own.cgroupBytes / n, pssBytesPerSandbox: own.pssBytes / n, processesPerSandbox: own.processes / n,
      layerdRssBytes: full.layerd.rssBytes, layerdPssBytes: full.layerd.pssBytes, layerdRssEmptyBytes: empty.layerd.rssBytes,
      holderRssBytes: full.own.rssBytes,
      createP99Ms: quantile(fullCreateMs.length > 0 ? fullCreateMs : createMs, 0.99),
      fullExecP50Ms: quantile(fullExecMs, 0.5), fullExecP99Ms: quantile(fullExecMs, 0.99), fullDestroyP99Ms: quantile(fullDestroyMs, 0.99),
      fillCreateP50Ms: quantile(createMs, 0.5), fillCreateP99Ms: quantile(createMs, 0.99),
      pingP99Ms: quantile(pings, 0.99), pingMaxMs: pings[pings.length - 1] ?? null,
      errors, ...(firstError === undefined ? {} : { firstError }),
      empty, full, after, fillSeconds, teardownSeconds
    }
    process.stderr.write(`teardown: ${fmt(teardownSeconds, 1)} s; after: ${JSON.stringify(after)}\n`)
    await writeReport({
      name: 'density',
      title: `Sandbox density: ${tier} tier, ${n} held at once`,
      command,
      load: load.stop(),
      markdown: `${table}\n\n${target}\n\nAfter teardown (${fmt(teardownSeconds, 1)} s): ${after.mounts} mounts, ${after.loops} loop devices under the home (empty node: ${empty.census.mounts}, ${empty.census.loops}).\n`,
      data
    }, a.string('out'))
  } finally {
    await teardown(held, concurrency).catch(() => {})
    await node.stopDaemon().catch(() => {})
    await rm(work, { recursive: true, force: true }).catch(() => {})
  }
}

/** Stop and destroy every held sandbox, C at a time. Idempotent. */
async function teardown (held: Held[], concurrency: number): Promise<void> {
  const queue = held.splice(0)
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let h = queue.pop(); h !== undefined; h = queue.pop()) {
      await h.sb.stop().catch(() => {})
      await h.running.catch(() => {})
      await h.sb.destroy()
    }
  }))
}

await main()
