/**
 * Shared plumbing for the side-by-side benchmarks (push-throughput,
 * cold-start, warm-read, daemon-memory): run a shell step and time it (wall
 * and CPU seconds of the child), drop the page cache, sample the load
 * average through a run, interleave contenders, and write the report as
 * JSON and Markdown to bench/results/<name>.{json,md}.
 *
 * This machine is shared and often loaded, so every benchmark measures its
 * contenders in one run, interleaved (A, B, C, A, B, C, …), and reports
 * medians and ratios, with the load average at start and end.
 *
 * Bench-only: may import anything.
 */
import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { UnsupportedError } from '../src/errors.js'

export const MB = 1e6
export const MIB = 1024 * 1024
/** The checkout (dist/bench/ is two levels below it). */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..')
export const RESULTS_DIR = join(REPO_ROOT, 'bench/results')
/** `node dist/cli/layerctl.js`. */
export const LAYERCTL_JS = join(REPO_ROOT, 'dist/cli/layerctl.js')
const USER_HZ = 100
const STDOUT_KEEP_CHARS = 64 * 1024
const STDERR_TAIL_CHARS = 2000

/** The `--out DIR` option of every bench that writes a report (bench-args.ts). */
export const REPORT_OPTIONS = { out: { type: 'string', default: RESULTS_DIR, value: 'DIR' } } as const

export function median (xs: number[]): number {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

/** The q-quantile (0..1) by nearest rank. NaN for no samples. Pure. */
export function quantile (xs: number[], q: number): number {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!
}

export function fmt (n: number, digits = 2): string {
  if (!Number.isFinite(n)) return String(n)
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
}

/** The three load averages, "1.23 4.56 7.89". */
export function loadAverage (): string {
  return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
}

/** CPU seconds (user + system) of this process's reaped children so far (/proc/self/stat cutime + cstime). */
export function childCpuSeconds (): number {
  const stat = readFileSync('/proc/self/stat', 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  // fields[0] is field 3 (state); cutime and cstime are fields 16 and 17.
  return (Number(fields[13]) + Number(fields[14])) / USER_HZ
}

export interface Timed {
  /** Wall seconds. */
  seconds: number
  /** User + system CPU seconds of the step and every process it waited for (10 ms resolution). */
  cpuSeconds: number
  /** The first 64 KiB of stdout. */
  stdout: string
}

export interface ShellOptions { env?: NodeJS.ProcessEnv, cwd?: string }

/**
 * Run `script` with `bash -e -o pipefail -c` and time it. Async. Rejects
 * with an Error naming the script and quoting its stderr tail if it exits
 * non-zero. Run one step at a time: the CPU figure is the difference of
 * this process's children CPU time, so a concurrently reaped child would
 * be counted too.
 */
export async function timeShell (script: string, opts: ShellOptions = {}): Promise<Timed> {
  const cpu0 = childCpuSeconds()
  const t0 = process.hrtime.bigint()
  const stdout = await new Promise<string>((resolve, reject) => {
    const child = spawn('bash', ['-e', '-o', 'pipefail', '-c', script], { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (c: Buffer) => { if (out.length < STDOUT_KEEP_CHARS) out += c.toString() })
    child.stderr.on('data', (c: Buffer) => { err = (err + c.toString()).slice(-STDERR_TAIL_CHARS) })
    child.on('error', reject)
    child.on('close', (code, signal) => {
      if (code === 0) resolve(out)
      else reject(new Error(`bench step failed (${signal ?? `exit ${String(code)}`}): ${script}\n${err.trim()}`))
    })
  })
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  return { seconds, cpuSeconds: childCpuSeconds() - cpu0, stdout }
}

/** Single-quote `s` for bash. */
export function shq (s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`
}

/**
 * sync, then drop the page cache, dentries and inodes
 * (`echo 3 > /proc/sys/vm/drop_caches`). Async. Throws UnsupportedError when
 * that is not allowed (not root). Pages mapped by a running process (an
 * lmdb map, a binary) are not dropped: stop the process first when they must be.
 */
export async function dropPageCaches (): Promise<void> {
  try {
    await timeShell('sync && echo 3 > /proc/sys/vm/drop_caches')
  } catch (err) {
    throw new UnsupportedError('cannot drop the page cache (/proc/sys/vm/drop_caches needs root)', { cause: err })
  }
}

/** Bytes of `file` resident in the page cache, from fincore(1). */
export async function residentBytes (file: string): Promise<number> {
  const out = (await timeShell(`fincore --bytes --noheadings --output RES ${shq(file)}`)).stdout.trim()
  return Number(out)
}

export interface LoadSampler {
  /** Stop sampling; returns the load averages seen. */
  stop: () => LoadFigures
}

export interface LoadFigures {
  /** /proc/loadavg's three figures at start and at end. */
  start: string
  end: string
  /** 1-minute load average sampled every few seconds through the run. */
  max1m: number
  mean1m: number
  samples: number
}

/** Sample the 1-minute load average every `intervalMs` until stop(). */
export function startLoadSampler (intervalMs = 5000): LoadSampler {
  const start = loadAverage()
  const samples: number[] = [Number(start.split(' ')[0])]
  const timer = setInterval(() => samples.push(Number(loadAverage().split(' ')[0])), intervalMs)
  timer.unref()
  return {
    stop: () => {
      clearInterval(timer)
      const end = loadAverage()
      samples.push(Number(end.split(' ')[0]))
      return { start, end, max1m: Math.max(...samples), mean1m: samples.reduce((a, b) => a + b, 0) / samples.length, samples: samples.length }
    }
  }
}

export interface Contender<T> {
  name: string
  /** One measured repetition; `rep` counts from 0. */
  run: (rep: number) => Promise<T>
}

/**
 * Run every contender once per repetition, in order, `reps` times
 * (A, B, C, A, B, C, …). Returns each contender's samples by name. Logs a
 * line per sample to stderr through `describe`.
 */
export async function runInterleaved<T> (reps: number, contenders: Array<Contender<T>>, describe: (sample: T) => string, opts: { rotate?: boolean } = {}): Promise<Map<string, T[]>> {
  const samples = new Map<string, T[]>(contenders.map(c => [c.name, []]))
  for (let rep = 0; rep < reps; rep++) {
    // rotate: rep r starts at contender r, so no contender always runs right after the same other one.
    const order = opts.rotate === true ? contenders.map((_, i) => contenders[(i + rep) % contenders.length]!) : contenders
    for (const c of order) {
      const s = await c.run(rep)
      samples.get(c.name)!.push(s)
      process.stderr.write(`  rep ${rep + 1}/${reps} ${c.name}: ${describe(s)}  [load ${loadAverage()}]\n`)
    }
  }
  return samples
}

/** A Markdown table; `|` inside a cell is escaped, the rest is written as given. */
export function markdownTable (header: string[], rows: string[][]): string {
  const line = (cells: string[]): string => `| ${cells.map(c => c.replace(/\|/g, '\\|')).join(' | ')} |`
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n')
}

export interface BenchReport {
  /** File stem: bench/results/<name>.json and .md. */
  name: string
  title: string
  /** The command that reproduces the run. */
  command: string
  load: LoadFigures
  /** Markdown body: tables and notes (the title, command and load lines are added). */
  markdown: string
  /** Everything measured, for the JSON. */
  data: Record<string, unknown>
}

/**
 * Print the report and write <outDir>/<name>.json and .md (bench/results/
 * unless the bench's `--out DIR` says otherwise). Async; rejects if the
 * files cannot be written.
 */
export async function writeReport (r: BenchReport, outDir: string = RESULTS_DIR): Promise<void> {
  const dir = resolve(outDir)
  const when = new Date().toISOString()
  const md = [
    `# ${r.title}`,
    '',
    `Command: \`${r.command}\``,
    '',
    `Run finished ${when}. Load average (1/5/15 min) at start: ${r.load.start}; at end: ${r.load.end}; ` +
      `1-min load through the run: mean ${fmt(r.load.mean1m, 1)}, max ${fmt(r.load.max1m, 1)} (2 cores).`,
    '',
    r.markdown.trim(),
    ''
  ].join('\n')
  process.stdout.write(`\n${md}\n`)
  await mkdir(dir, { recursive: true })
  await writeFile(join(dir, `${r.name}.json`), JSON.stringify({ name: r.name, command: r.command, date: when, load: r.load, ...r.data }, null, 2) + '\n')
  await writeFile(join(dir, `${r.name}.md`), md)
  process.stdout.write(`wrote ${join(dir, `${r.name}.json`)} and ${r.name}.md\n`)
}

/** The daemon entry a build's launcher starts, in its `dist`: the bundled start where the build has one (layerd/layerd.cjs), else the modules' entry (layerd/main.js). */
export function daemonEntryOf (dist: string): string {
  const bundled = join(dist, 'layerd/layerd.cjs')
  return existsSync(bundled) ? bundled : join(dist, 'layerd/main.js')
}
