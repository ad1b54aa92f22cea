/**
 * What starting one process costs a node process of a given size: Node's
 * child_process.spawn (libuv forks: the kernel copies the caller's page
 * tables) against spawnVfork (src/host/vfork-spawn.ts: posix_spawn, a clone
 * with CLONE_VM | CLONE_VFORK), which the sandbox tiers start their runtime
 * process (runc, crun, bwrap) with. The caller's size is a ballast of
 * touched Buffers (--ballast sizes, MB); at each size the two take turns,
 * --spawns sequential spawns of `true` each, --rounds rounds, medians.
 *
 *   node dist/bench/spawn-cost.js [--ballast 0,100,300,1000] [--spawns N] [--rounds R] [--out DIR]
 *
 * Bench-only: may import anything.
 */
import { spawn } from 'node:child_process'
import { performance } from 'node:perf_hooks'
import { spawnVfork } from '../src/host/vfork-spawn.js'
import { fmt, markdownTable, median, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const SPEC: BenchOptions = {
  ballast: { type: 'string', default: '0,100,300,1000', value: 'MB,…' },
  spawns: { type: 'string', default: '50', value: 'N' },
  rounds: { type: 'string', default: '5', value: 'R' },
  ...REPORT_OPTIONS
}
const ARGS = benchArgs('spawn-cost', SPEC)
const ENV = { PATH: '/usr/bin:/bin' }

async function forkMs (n: number): Promise<number> {
  const started = performance.now()
  for (let i = 0; i < n; i++) await new Promise(resolve => spawn('true', [], { env: ENV }).on('close', resolve))
  return (performance.now() - started) / n
}

async function vforkMs (n: number): Promise<number> {
  const started = performance.now()
  for (let i = 0; i < n; i++) {
    const child = spawnVfork(['true'], { env: ENV })
    child.stdin.end()
    child.stdout.resume()
    child.stderr.resume()
    await child.closed
  }
  return (performance.now() - started) / n
}

async function main (): Promise<void> {
  const sizes = ARGS.string('ballast').split(',').map(s => Number(s))
  if (sizes.some(s => !Number.isInteger(s) || s < 0)) throw new Error(`spawn-cost: --ballast ${ARGS.string('ballast')}: want MB sizes such as 0,100,300`)
  const spawns = ARGS.number('spawns', { min: 1 })
  const rounds = ARGS.number('rounds', { min: 1 })
  const load = startLoadSampler()
  const ballast: Buffer[] = []
  const rows: string[][] = []
  const data: Array<{ ballastMb: number, rssMb: number, forkMs: number[], vforkMs: number[] }> = []
  for (const mb of [...sizes].sort((a, b) => a - b)) {
    while (ballast.length < mb) ballast.push(Buffer.alloc(1024 * 1024, ballast.length & 0xff))
    const fork: number[] = []
    const vfork: number[] = []
    for (let r = 0; r < rounds; r++) {
      if (r % 2 === 0) { fork.push(await forkMs(spawns)); vfork.push(await vforkMs(spawns)) } else { vfork.push(await vforkMs(spawns)); fork.push(await forkMs(spawns)) }
    }
    const rssMb = process.memoryUsage.rss() / 1024 ** 2
    data.push({ ballastMb: mb, rssMb, forkMs: fork, vforkMs: vfork })
    rows.push([String(mb), fmt(rssMb, 0), fmt(median(fork), 2), fmt(median(vfork), 2), `${fmt(median(fork) / median(vfork), 1)}x`])
  }
  const markdown = [
    `Sequential spawns of \`true\`: ${rounds} rounds of ${spawns} per way at each caller size, taking turns; medians. ms per spawn, until its 'close'.`,
    '',
    markdownTable(['ballast (MB)', 'caller RSS (MB)', 'child_process.spawn (fork) ms', 'spawnVfork (posix_spawn) ms', 'fork ÷ vfork'], rows)
  ].join('\n')
  await writeReport({
    name: 'spawn-cost',
    title: 'Starting a process from a node process: child_process.spawn against spawnVfork',
    command: `node dist/bench/spawn-cost.js --ballast ${sizes.join(',')} --spawns ${spawns} --rounds ${rounds}`,
    load: load.stop(),
    markdown,
    data: { spawns, rounds, sizes: data }
  }, ARGS.string('out'))
}

await main()
