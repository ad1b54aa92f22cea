/**
 * layerd's memory with 1 and with 20 mounted images (issue 3).
 *
 *   node dist/bench/daemon-memory.js [--images N] [--reps N] [--work DIR] [--out DIR]
 *
 * Images: N (default 20) distinct manifests, each python-v1's two gzip
 * layers plus a small third layer of its own (a marker file and 256 KiB of
 * seeded bytes, built with fixtures/layer-dsl.ts), written as OCI layouts
 * (the big blobs hard-linked from the fixture) and pushed once into a
 * shared fs store (not measured).
 * Each repetition: a fresh LAYERD_HOME (empty chunk cache) on that store,
 * its daemon started, then readings of /proc/PID/status (VmRSS, VmHWM,
 * RssAnon, RssFile) and /proc/PID/smaps_rollup (Pss, Pss_Anon, Pss_File):
 * idle; 1 image mounted; after a workload on it (`find MOUNT -ls` and
 * `chroot MOUNT python3 -c 'import json, sqlite3, ssl'`); N mounted; after
 * the workload on each. lmdb is memory-mapped: its pages count in RSS as
 * RssFile, which is why Pss and the anon/file split are reported too.
 * Per-mount overhead = (N mounts − 1 mount) / (N − 1).
 *
 * Bench-only: may import anything.
 */
import { createHash } from 'node:crypto'
import { link, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { buildLayerTar, dir, file } from '../fixtures/layer-dsl.js'
import { layerdNode, type LayerdNode } from '../fixtures/layerd-harness.js'
import { fmt, REPORT_OPTIONS, markdownTable, MB, median, shq, startLoadSampler, timeShell, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const SPEC = {
  images: { type: 'string', default: '20', value: 'N' },
  reps: { type: 'string', default: '2', value: 'N' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('daemon-memory', SPEC)
const IMAGES = ARGS.number('images', { min: 1 })
const REPS = ARGS.number('reps', { min: 1 })
const WORKLOAD = `/usr/bin/python3 -c 'import json, sqlite3, ssl'`
const SETTLE_MS = 1000
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

async function ok (node: LayerdNode, ...args: string[]): Promise<string> {
  const r = await node.layerctl(...args)
  if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')} failed: ${r.stderr.trim()}`)
  return r.stdout
}

const imageName = (i: number): string => `bench/mem:v${String(i).padStart(2, '0')}`

interface Reading { phase: string, mounts: number, memory: Memory, cacheBytes: number }

async function oneRun (work: string, storeUrl: string, rep: number): Promise<Reading[]> {
  const node = layerdNode(join(work, `node-${rep}`), { store: storeUrl })
  await mkdir(node.home, { recursive: true })
  const child = await node.startDaemon()
  const pid = child.pid!
  const readings: Reading[] = []
  const mnts = Array.from({ length: IMAGES }, (_, i) => join(node.home, `mnt-${i}`))
  const read = async (phase: string, mounts: number): Promise<void> => {
    await new Promise(resolve => setTimeout(resolve, SETTLE_MS))
    const stats = JSON.parse(await ok(node, 'stats', '--json')) as { cache?: { bytes?: number } }
    const memory = await readMemory(pid)
    readings.push({ phase, mounts, memory, cacheBytes: stats.cache?.bytes ?? NaN })
    process.stderr.write(`  rep ${rep + 1} ${phase}: VmRSS ${fmt(memory.VmRSS / MB, 1)} MB, Pss ${fmt(memory.Pss / MB, 1)} MB (anon ${fmt(memory.Pss_Anon / MB, 1)})\n`)
  }
  const workload = async (mnt: string): Promise<void> => {
    await timeShell(`find ${shq(mnt)} -ls > /dev/null && chroot ${shq(mnt)} ${WORKLOAD}`)
  }
  try {
    await read('idle (no mount)', 0)
    await mkdir(mnts[0]!)
    await ok(node, 'mount', imageName(0), mnts[0]!)
    await read('1 mounted', 1)
    await workload(mnts[0]!)
    await read('1 mounted, after workload', 1)
    for (let i = 1; i < IMAGES; i++) {
      await mkdir(mnts[i]!)
      await ok(node, 'mount', imageName(i), mnts[i]!)
    }
    await read(`${IMAGES} mounted`, IMAGES)
    for (const m of mnts) await workload(m)
    await read(`${IMAGES} mounted, after workload on each`, IMAGES)
  } finally {
    await node.stopDaemon()
    await rm(node.home, { recursive: true, force: true })
  }
  return readings
}

async function main (): Promise<void> {
  const imgs = await ensureDebianImages()
  const py = imgs.images['python-v1']
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-mem-'))
  const command = `node dist/bench/daemon-memory.js --images ${IMAGES} --reps ${REPS}`
  console.error(`${command}\n  work dir ${work}`)
  const load = startLoadSampler()
  try {
    const storeUrl = `file://${join(work, 'store')}`
    const pusher = layerdNode(join(work, 'pusher'), { store: storeUrl })
    await mkdir(pusher.home, { recursive: true })
    const t0 = performance.now()
    for (let i = 0; i < IMAGES; i++) {
      const layout = join(work, `layout-${i}`)
      await variantLayout(py.ociLayout, layout, i)
      await ok(pusher, 'push', layout, imageName(i))
    }
    console.error(`  pushed ${IMAGES} images in ${fmt((performance.now() - t0) / 1000, 1)} s`)

    const runs: Reading[][] = []
    for (let rep = 0; rep < REPS; rep++) runs.push(await oneRun(work, storeUrl, rep))
    const phases = runs[0]!.map(r => r.phase)
    const med = phases.map((phase, k) => {
      const rs = runs.map(run => run[k]!)
      const memory = Object.fromEntries(FIELDS.map(f => [f, median(rs.map(r => r.memory[f]))])) as unknown as Memory
      return { phase, mounts: rs[0]!.mounts, memory, cacheBytes: median(rs.map(r => r.cacheBytes)) }
    })
    const mb = (b: number): string => fmt(b / MB, 1)
    const rows = med.map(r => [r.phase, mb(r.memory.VmRSS), mb(r.memory.VmHWM), mb(r.memory.RssAnon), mb(r.memory.RssFile), mb(r.memory.Pss), mb(r.memory.Pss_Anon), mb(r.memory.Pss_File), mb(r.cacheBytes)])
    const at = (phase: string): Memory => med.find(r => r.phase === phase)!.memory
    const perMount = (one: string, many: string): Record<keyof Memory, number> =>
      Object.fromEntries(FIELDS.map(f => [f, (at(many)[f] - at(one)[f]) / (IMAGES - 1)])) as Record<keyof Memory, number>
    const afterMount = perMount('1 mounted', `${IMAGES} mounted`)
    const afterWork = perMount('1 mounted, after workload', `${IMAGES} mounted, after workload on each`)
    const markdown = [
      `${IMAGES} distinct images (python-v1's 2 layers + a 256 KiB layer of their own). Daemon started in a fresh LAYERD_HOME (cold chunk cache) on a shared fs store; ` +
        `readings ${SETTLE_MS} ms after each step; median of ${REPS} runs. Workload per mount: \`find MOUNT -ls\` + \`chroot MOUNT ${WORKLOAD}\`. MB = 10^6 bytes.`,
      '',
      markdownTable(['phase', 'VmRSS', 'VmHWM', 'RssAnon', 'RssFile', 'Pss', 'Pss_Anon', 'Pss_File', 'chunk cache bytes'], rows),
      '',
      `Per additional mount (${IMAGES} vs 1, ÷ ${IMAGES - 1}): after mounting **${mb(afterMount.VmRSS)} MB VmRSS** (${mb(afterMount.RssAnon)} MB anon), ` +
        `after the workload **${mb(afterWork.VmRSS)} MB VmRSS** (${mb(afterWork.RssAnon)} MB anon, ${mb(afterWork.RssFile)} MB file-backed, i.e. the lmdb map), Pss ${mb(afterWork.Pss)} MB.`
    ].join('\n')
    await writeReport({ name: 'daemon-memory', title: `layerd memory with 1 and ${IMAGES} mounted images`, command, load: load.stop(), markdown, data: { images: IMAGES, reps: REPS, phases: med, perMountAfterMount: afterMount, perMountAfterWorkload: afterWork, runs } }, ARGS.string('out'))
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}

await main()
