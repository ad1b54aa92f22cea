/**
 * layerd's memory: idle, with 1 and with N mounted images, before and after
 * their workload (issues 3 and 14), for this build and, side by side in the
 * same run, a baseline build (`--baseline DIR`: another checkout, built).
 *
 *   node dist/bench/daemon-memory.js [--images N] [--reps N] [--baseline DIR] [--work DIR]
 *
 * Images: N (default 20) distinct manifests, each python-v1's two gzip
 * layers plus a small third layer of its own (a marker file and 256 KiB of
 * seeded bytes, built with fixtures/layer-dsl.ts), written as OCI layouts
 * (the big blobs hard-linked from the fixture) and pushed once into a
 * shared fs store (not measured).
 * Each repetition, for each build (the order alternates): a fresh
 * LAYERD_HOME (empty chunk cache) on that store, its daemon started with the
 * node flags that build's launcher uses, then readings of /proc/PID/status
 * (VmRSS, VmHWM, RssAnon, RssFile) and /proc/PID/smaps_rollup (Pss,
 * Pss_Anon, Pss_File) SETTLE_MS after each step: idle; 1 image mounted;
 * after a workload on it (`find MOUNT -ls` and `chroot MOUNT python3 -c
 * 'import json, sqlite3, ssl'`); N mounted; after the workload on each.
 * The lmdb map's resident pages count in RSS as RssFile. VmHWM is the
 * high-water mark so far (what a burst took). Per-mount growth =
 * (N mounts − 1 mount) / (N − 1).
 *
 * Bench-only: may import anything.
 */
import { createHash } from 'node:crypto'
import { link, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { buildLayerTar, dir, file } from '../fixtures/layer-dsl.js'
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { ControlClient } from '../src/daemon/client/control-client.js'
import { socketPath } from '../src/daemon/client/control-protocol.js'
import { DAEMON_NODE_FLAGS } from '../src/daemon/client/daemon-launcher.js'
import { daemonEntryOf, fmt, REPORT_OPTIONS, markdownTable, MB, median, REPO_ROOT, shq, startLoadSampler, timeShell, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const SPEC = {
  images: { type: 'string', default: '20', value: 'N' },
  reps: { type: 'string', default: '2', value: 'N' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  baseline: { type: 'string', default: '', value: 'DIR' },
  modes: { type: 'string', default: 'mount,stack', value: 'mount,stack' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('daemon-memory', SPEC)
const IMAGES = ARGS.number('images', { min: 1 })
const REPS = ARGS.number('reps', { min: 1 })
const WORKLOAD = `/usr/bin/python3 -c 'import json, sqlite3, ssl'`
/** Readings are taken this long after a step: the daemon gives a burst's memory back after 1.5 s of quiet (src/daemon/memory/memory-settler.ts). */
const SETTLE_MS = 3000
const BASELINE = ARGS.string('baseline') ?? ''
const MODES = (ARGS.string('modes') ?? 'mount,stack').split(',') as Mode[]
for (const m of MODES) if (m !== 'mount' && m !== 'stack') { console.error(`daemon-memory: --modes ${JSON.stringify(m)}: use mount, stack or mount,stack`); process.exit(2) }
const KIB = 1024

interface Memory { VmRSS: number, VmHWM: number, RssAnon: number, RssFile: number, Pss: number, Pss_Anon: number, Pss_File: number }
const FIELDS: Array<keyof Memory> = ['VmRSS', 'VmHWM', 'RssAnon', 'RssFile', 'Pss', 'Pss_Anon', 'Pss_File']

/** Memory of `pid` in bytes, from /proc/PID/status and smaps_rollup. */
async function readMemory (pid: number): Promise<Memory> {
  const text = (await readFile(`/proc/${pid}/status`, 'utf8')) + (await readFile(`/proc/${pid}/smaps_rollup`, 'utf8'))
  const m = {} as Memory
  for (const f of FIELDS) {
    const match = new RegExp(`^${f}:\\s+(\\d+) kB`, 'm').exec(text)
    if (match === null) throw new Error(`/proc/${pid}: no ${f} line`)
    m[f] = Number(match[1]) * KIB
  }
  return m
}

const sha256 = (b: Uint8Array): string => `sha256:${createHash('sha256').update(b).digest('hex')}`

/** An OCI layout at `dst`: `src`'s single image plus one small layer of its own (hard-linked big blobs). */
async function variantLayout (src: string, dst: string, i: number): Promise<void> {
  const blob = (root: string, d: string): string => join(root, 'blobs', ...d.split(':'))
  const index = JSON.parse(await readFile(join(src, 'index.json'), 'utf8')) as { manifests: Array<{ digest: string }> }
  const manifest = JSON.parse(await readFile(blob(src, index.manifests[0]!.digest), 'utf8')) as { config: { digest: string, size: number, mediaType: string }, layers: Array<{ digest: string, size: number, mediaType: string }> }
  const config = JSON.parse(await readFile(blob(src, manifest.config.digest), 'utf8')) as { rootfs: { diff_ids: string[] }, history?: unknown[] }
  await mkdir(join(dst, 'blobs', 'sha256'), { recursive: true })
  for (const l of manifest.layers) await link(blob(src, l.digest), blob(dst, l.digest))
  const tar = buildLayerTar([dir('bench'), file(`bench/variant-${i}.txt`, `variant ${i}\n`), file('bench/data.bin', { size: 256 * KIB, seed: `variant-${i}` })])
  const gz = gzipSync(tar)
  const put = async (data: Uint8Array): Promise<string> => {
    const d = sha256(data)
    await writeFile(blob(dst, d), data)
    return d
  }
  const layerDigest = await put(gz)
  config.rootfs.diff_ids.push(sha256(tar))
  config.history?.push({ created_by: `layerd bench variant ${i}` })
  const configBytes = Buffer.from(JSON.stringify(config))
  const configDigest = await put(configBytes)
  manifest.config = { ...manifest.config, digest: configDigest, size: configBytes.length }
  manifest.layers.push({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: layerDigest, size: gz.length })
  const manifestBytes = Buffer.from(JSON.stringify(manifest))
  const manifestDigest = await put(manifestBytes)
  await writeFile(join(dst, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }))
  await writeFile(join(dst, 'index.json'), JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: manifestDigest, size: manifestBytes.length, annotations: { 'org.opencontainers.image.ref.name': 'latest' } }]
  }))
}

/** A build to measure: its root (dist/ inside), and the node flags its launcher starts layerd with. */
interface Build { label: string, root: string, nodeFlags: string[] }

interface Node { home: string, env: NodeJS.ProcessEnv, build: Build }

async function ok (node: Node, ...args: string[]): Promise<string> {
  const r = await new Promise<{ code: number, stdout: string, stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [join(node.build.root, 'dist/cli/layerctl.js'), ...args], { env: node.env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
    child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
    child.on('error', reject)
    child.on('close', code => resolve({ code: code ?? 1, stdout, stderr }))
  })
  if (r.code !== 0) throw new Error(`${node.build.label}: layerctl ${args.join(' ')} failed: ${r.stderr.trim()}`)
  return r.stdout
}

async function startDaemon (node: Node): Promise<ChildProcess> {
  const child = spawn(process.execPath, [...node.build.nodeFlags, daemonEntryOf(join(node.build.root, 'dist')), '--foreground', '--home', node.home], { env: node.env, stdio: ['ignore', 'ignore', 'pipe'] })
  let log = ''
  child.stderr!.on('data', (c: Buffer) => { log += c.toString() })
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${node.build.label}: layerd exited with ${child.exitCode}: ${log}`)
    if (existsSync(socketPath(node.home))) {
      // An answered ping, not an accepted connect: layerd accepts before it serves, and answers once it does.
      try { const c = await ControlClient.connect(socketPath(node.home), 500); try { await c.call('ping') } finally { c.close() } return child } catch {}
    }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  child.kill('SIGKILL')
  throw new Error(`${node.build.label}: layerd did not come up: ${log}`)
}

async function stopDaemon (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  child.kill('SIGTERM')
  await exited
}

const imageName = (i: number): string => `bench/mem:v${String(i).padStart(2, '0')}`

interface Reading { phase: string, mounts: number, memory: Memory, cacheBytes: number }

/**
 * How images are mounted: `mount` = one `layerctl mount` (a merged mount) each; `stack` = the
 * sandbox path (the `image` control call createSandbox makes: images on one base share its mount).
 */
type Mode = 'mount' | 'stack'

async function oneRun (work: string, storeUrl: string, build: Build, mode: Mode, rep: number): Promise<Reading[]> {
  const home = join(work, `node-${build.label.replace(/ /g, '-')}-${mode}-${rep}`)
  const node: Node = { home, build, env: { ...process.env, LAYERD_HOME: home, LAYERD_STORE: storeUrl } }
  await mkdir(home, { recursive: true })
  const child = await startDaemon(node)
  const pid = child.pid!
  const readings: Reading[] = []
  const mnts = Array.from({ length: IMAGES }, (_, i) => join(home, `mnt-${i}`))
  const client = await ControlClient.connect(socketPath(home))
  const mountImage = async (i: number): Promise<void> => {
    if (mode === 'mount') {
      await mkdir(mnts[i]!)
      await ok(node, 'mount', imageName(i), mnts[i]!)
    } else {
      mnts[i] = (await client.call('image', { image: imageName(i), store: storeUrl })).mountpoint
    }
  }
  const read = async (phase: string, mounts: number): Promise<void> => {
    await new Promise(resolve => setTimeout(resolve, SETTLE_MS))
    const stats = JSON.parse(await ok(node, 'stats', '--json')) as { cache?: { bytes?: number } }
    const memory = await readMemory(pid)
    readings.push({ phase, mounts, memory, cacheBytes: stats.cache?.bytes ?? NaN })
    process.stderr.write(`  rep ${rep + 1} ${build.label} ${mode} ${phase}: VmRSS ${fmt(memory.VmRSS / MB, 1)} MB, Pss ${fmt(memory.Pss / MB, 1)} MB (anon ${fmt(memory.Pss_Anon / MB, 1)}), VmHWM ${fmt(memory.VmHWM / MB, 1)}\n`)
  }
  const workload = async (mnt: string): Promise<void> => {
    await timeShell(`find ${shq(mnt)} -ls > /dev/null && chroot ${shq(mnt)} ${WORKLOAD}`)
  }
  try {
    await read('idle (no mount)', 0)
    await mountImage(0)
    await read('1 mounted', 1)
    await workload(mnts[0]!)
    await read('1 mounted, after workload', 1)
    for (let i = 1; i < IMAGES; i++) await mountImage(i)
    await read(`${IMAGES} mounted`, IMAGES)
    for (const m of mnts) await workload(m)
    await read(`${IMAGES} mounted, after workload on each`, IMAGES)
  } finally {
    client.close()
    await stopDaemon(child)
    await rm(home, { recursive: true, force: true })
  }
  return readings
}

/** DAEMON_NODE_FLAGS of the build at `root`, or [] for a build whose launcher has none. */
async function baselineNodeFlags (root: string): Promise<string[]> {
  const launcher = join(root, 'dist/src/daemon/client/daemon-launcher.js')
  if (!existsSync(launcher)) return []
  const mod = await import(launcher) as { DAEMON_NODE_FLAGS?: string[] }
  return mod.DAEMON_NODE_FLAGS ?? []
}

async function main (): Promise<void> {
  const imgs = await ensureDebianImages()
  const py = imgs.images['python-v1']
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-mem-'))
  const command = `node dist/bench/daemon-memory.js --images ${IMAGES} --reps ${REPS}${BASELINE === '' ? '' : ` --baseline ${BASELINE}`}`
  console.error(`${command}\n  work dir ${work}`)
  const builds: Build[] = [{ label: 'this build', root: REPO_ROOT, nodeFlags: DAEMON_NODE_FLAGS }]
  // The node flags the baseline's own launcher uses; a build from before issue 14 had none.
  if (BASELINE !== '') builds.unshift({ label: 'baseline', root: BASELINE, nodeFlags: await baselineNodeFlags(BASELINE) })
  const load = startLoadSampler()
  try {
    const storeUrl = `file://${join(work, 'store')}`
    const pushHome = join(work, 'pusher')
    const pusher: Node = { home: pushHome, build: builds.at(-1)!, env: { ...process.env, LAYERD_HOME: pushHome, LAYERD_STORE: storeUrl } }
    await mkdir(pushHome, { recursive: true })
    const t0 = performance.now()
    for (let i = 0; i < IMAGES; i++) {
      const layout = join(work, `layout-${i}`)
      await variantLayout(py.ociLayout, layout, i)
      await ok(pusher, 'push', layout, imageName(i))
    }
    console.error(`  pushed ${IMAGES} images in ${fmt((performance.now() - t0) / 1000, 1)} s`)

    const runs = new Map<string, Reading[][]>()
    for (const mode of MODES) for (const b of builds) runs.set(`${b.label} ${mode}`, [])
    for (let rep = 0; rep < REPS; rep++) {
      const order = rep % 2 === 0 ? builds : [...builds].reverse()
      for (const mode of MODES) for (const build of order) runs.get(`${build.label} ${mode}`)!.push(await oneRun(work, storeUrl, build, mode, rep))
    }
    const mb = (b: number): string => fmt(b / MB, 1)
    const summaries = [...runs.keys()].map(label => {
      const rr = runs.get(label)!
      const phases = rr[0]!.map(r => r.phase)
      const med = phases.map((phase, k) => {
        const rs = rr.map(run => run[k]!)
        const memory = Object.fromEntries(FIELDS.map(f => [f, median(rs.map(r => r.memory[f]))])) as unknown as Memory
        return { phase, mounts: rs[0]!.mounts, memory, cacheBytes: median(rs.map(r => r.cacheBytes)) }
      })
      const at = (phase: string): Memory => med.find(r => r.phase === phase)!.memory
      const perMount = (one: string, many: string): Record<keyof Memory, number> =>
        Object.fromEntries(FIELDS.map(f => [f, (at(many)[f] - at(one)[f]) / (IMAGES - 1)])) as Record<keyof Memory, number>
      return { build: label, phases: med, perMountAfterMount: perMount('1 mounted', `${IMAGES} mounted`), perMountAfterWorkload: perMount('1 mounted, after workload', `${IMAGES} mounted, after workload on each`) }
    })
    const header = ['build, mounts', 'phase', 'VmRSS', 'VmHWM', 'RssAnon', 'RssFile', 'Pss']
    const rows = summaries.flatMap(s => [
      ...s.phases.map(p => [s.build, p.phase, mb(p.memory.VmRSS), mb(p.memory.VmHWM), mb(p.memory.RssAnon), mb(p.memory.RssFile), mb(p.memory.Pss)]),
      [s.build, `per further image, after the workload (${IMAGES} vs 1, ÷ ${IMAGES - 1})`, mb(s.perMountAfterWorkload.VmRSS), '', mb(s.perMountAfterWorkload.RssAnon), mb(s.perMountAfterWorkload.RssFile), mb(s.perMountAfterWorkload.Pss)]
    ])
    const markdown = [
      `${IMAGES} distinct images (python-v1's 2 layers + a 256 KiB layer of their own), mounted either with one \`layerctl mount\` each (\`mount\`: a merged mount per image) or as createSandbox mounts them (\`stack\`: the \`image\` control call; images on one base share its FUSE mount, each adds its top layer and an overlay). Each daemon started in a fresh LAYERD_HOME (cold chunk cache) on a shared fs store; ` +
        `readings ${SETTLE_MS} ms after each step; median of ${REPS} runs per build, builds alternating. Workload per mount: \`find MOUNT -ls\` + \`chroot MOUNT ${WORKLOAD}\`. MB = 10^6 bytes; ` +
        'RssFile includes the lmdb map\'s resident pages and the node binary (shared with every node process: Pss counts it by share).',
      '',
      markdownTable(header, rows)
    ].join('\n')
    await writeReport({ name: 'daemon-memory', title: `layerd memory with 1 and ${IMAGES} mounted images`, command, load: load.stop(), markdown, data: { images: IMAGES, reps: REPS, settleMs: SETTLE_MS, builds: summaries, runs: Object.fromEntries(runs) } }, ARGS.string('out'))
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}

await main()
