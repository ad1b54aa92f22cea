/**
 * Probe for issue 15's bytes target: how chunking of large ELF files
 * (src/format/file-chunkers.ts) and the kernel's readahead window change the
 * bytes, GETs and time of the cold-start workload (`chroot ROOT python3 -c
 * 'import json, sqlite3, ssl'` over python-v1).
 *
 *   node dist/bench/elf-chunking.js [--reps N] [--variants LIST] [--configs LIST] [--min-elf-kib N] [--no-link] [--bandwidth BITS] [--rtt-ms MS] [--work DIR] [--out DIR]
 *
 * Set-up (not timed): python-v1 pushed once per chunking variant, into its
 * own fs store and its own prefix of one s3rver bucket. Then, interleaved,
 * for each variant × readahead: a cold layerd run (bench/cold-start-layerd.ts,
 * control API) on the fs store, and one through the cold-start link model
 * on S3. A readahead other than the daemon's is written to the mounts'
 * `read_ahead_kb` (sysfs) after the mount, before the workload.
 *
 * Readahead configs (`--configs`, comma-separated): `raKB` sets the mounts'
 * read_ahead_kb; `.nbKB` (blob-neighbour budget), `.nohint` (no in-file
 * prefetch hint) and `.bigplain` (neither, for files of at least
 * --min-elf-kib) set LAYERD_PROBE_* variables for the daemon, which only a
 * daemon built with bench/probes/readahead-knobs.patch reads (the probe
 * knobs were not kept; see bench/README.md, "Where the bytes go").
 *
 * Variants: `default` (FastCDC 8/32/128 KiB everywhere), `cdc-K` (FastCDC
 * K/4, K, 4K KiB in ELF files of at least --min-elf-kib), `fixed-K` (K KiB
 * fixed chunks from the file's start there: page-aligned).
 *
 * Bench-only: may import anything.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../fixtures/debian-images.js'
import { startS3Engine, type S3Engine } from '../fixtures/s3-engine.js'
import { parseRef } from '../src/format/ref.js'
import type { LargeElfChunking } from '../src/format/file-chunkers.js'
import { DEFAULT_CHUNKING } from '../src/image/chunking-pool.js'
import { pushImage } from '../src/image/push.js'
import { openMemoryNodeDb } from '../src/state/node-db.js'
import { openStore } from '../src/store/open-store.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { fmt, markdownTable, MB, median, REPORT_OPTIONS, runInterleaved, startLoadSampler, writeReport } from './bench-report.js'
import { coldLayerdRun, type ColdSample } from './cold-start-layerd.js'
import { describeLink, parseBandwidth, type LinkSpec } from './deploy/link-model.js'
import { ThrottleProxy } from './deploy/throttle-proxy.js'

const SPEC = {
  reps: { type: 'string', default: '3', value: 'N' },
  variants: { type: 'string', default: 'default,cdc-16,cdc-8,fixed-16', value: 'LIST' },
  configs: { type: 'string', default: 'ra1024,ra128', value: 'LIST' },
  'min-elf-kib': { type: 'string', default: '1024', value: 'N' },
  'no-link': { type: 'boolean' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  bandwidth: { type: 'string', default: '1g', value: 'BITS' },
  'rtt-ms': { type: 'string', default: '1', value: 'MS' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('elf-chunking', SPEC)
const REPS = ARGS.number('reps', { min: 1 })
const MIN_ELF_BYTES = ARGS.number('min-elf-kib', { min: 1 }) * 1024
const LINK: LinkSpec = { bitsPerSecond: parseBandwidth(ARGS.string('bandwidth')), rttMs: ARGS.number('rtt-ms', { integer: false }) }
const VARIANTS = ARGS.string('variants').split(',').map(v => v.trim()).filter(v => v !== '')
/** A readahead configuration: `raKB` (the mounts' read_ahead_kb), optionally `.nbKB` (blob-neighbour budget, KiB) and `.nohint` (no in-file prefetch hint). */
interface ReadAheadConfig { name: string, readAheadKb: number, neighbourKb?: number, fileHint: boolean, bigPlain?: boolean }
const CONFIGS: ReadAheadConfig[] = ARGS.string('configs').split(',').map(v => v.trim()).filter(v => v !== '').map(name => {
  const c: ReadAheadConfig = { name, readAheadKb: NaN, fileHint: true }
  for (const token of name.split('.')) {
    const m = /^(ra|nb)(\d+)$/.exec(token)
    if (m?.[1] === 'ra') c.readAheadKb = Number(m[2])
    else if (m?.[1] === 'nb') c.neighbourKb = Number(m[2])
    else if (token === 'nohint') c.fileHint = false
    else if (token === 'bigplain') c.bigPlain = true
    else { process.stderr.write(`elf-chunking: --configs: ${JSON.stringify(name)}: expected raKB[.nbKB][.nohint]\n`); process.exit(2) }
  }
  if (Number.isNaN(c.readAheadKb)) { process.stderr.write(`elf-chunking: --configs: ${JSON.stringify(name)} names no raKB\n`); process.exit(2) }
  return c
})
/** The daemon's own window (src/fs/image-mount.ts READ_AHEAD_1MIB_IN_KIB): left as it is. */
const DAEMON_READ_AHEAD_KB = 1024
const IMAGE = 'bench/python:v1'
const WORKLOAD = `/usr/bin/python3 -c 'import json, sqlite3, ssl'`
const BUCKET = 'layerd-elf'

/** The large-ELF chunking a variant name stands for; undefined for `default`. Exits 2 on a bad name. */
function largeElf (variant: string): LargeElfChunking | undefined {
  if (variant === 'default') return undefined
  const m = /^(cdc|fixed)-(\d+)$/.exec(variant)
  const kib = m === null ? NaN : Number(m[2])
  if (m === null || !(kib >= 1)) { process.stderr.write(`elf-chunking: --variants: ${JSON.stringify(variant)}: expected default, cdc-K or fixed-K (K in KiB)\n`); process.exit(2) }
  const k = kib * 1024
  return m[1] === 'cdc' ? { minFileBytes: MIN_ELF_BYTES, cdc: { minSize: k / 4, avgSize: k, maxSize: k * 4 } } : { minFileBytes: MIN_ELF_BYTES, fixedBytes: k }
}

/** Write `kib` to the read_ahead_kb of every FUSE mount under `home` (the daemon's stack mounts). */
async function setReadAhead (home: string, kib: number): Promise<void> {
  const lines = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n')
  let n = 0
  for (const line of lines) {
    const f = line.split(' ')
    const sep = f.indexOf('-')
    if (sep < 0 || !f[sep + 1]!.startsWith('fuse') || !f[4]!.startsWith(home)) continue
    await writeFile(`/sys/class/bdi/${f[2]}/read_ahead_kb`, String(kib))
    n++
  }
  if (n === 0) throw new Error(`no FUSE mount under ${home} to set read_ahead_kb on`)
}

interface Row { name: string, variant: string, config: string, link: boolean, run: (rep: number) => Promise<ColdSample> }

async function main (): Promise<void> {
  const py = (await ensureDebianImages()).images['python-v1']
  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-elf-'))
  const link = !ARGS.flag('no-link')
  const command = `node dist/bench/elf-chunking.js --reps ${REPS} --variants ${VARIANTS.join(',')} --configs ${CONFIGS.map(c => c.name).join(',')} --min-elf-kib ${MIN_ELF_BYTES / 1024}${link ? ` --bandwidth ${ARGS.string('bandwidth')} --rtt-ms ${LINK.rttMs}` : ' --no-link'}`
  console.error(`${command}\n  work dir ${work}`)
  const load = startLoadSampler()
  let engine: S3Engine | undefined
  let proxy: ThrottleProxy | undefined
  try {
    if (link) {
      engine = await startS3Engine('s3rver', join(work, 's3rver'), BUCKET)
      proxy = await ThrottleProxy.start({ upstreamHost: '127.0.0.1', upstreamPort: engine.port, link: LINK, name: 's3rver' })
    }
    const keys = engine === undefined ? {} : { AWS_ACCESS_KEY_ID: engine.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: engine.credentials.secretAccessKey }
    const pushes: Record<string, { tocBytes: number, chunks: number, storedBytes: number }> = {}
    const rows: Row[] = []
    for (const variant of VARIANTS) {
      const chunking = { ...DEFAULT_CHUNKING, ...(largeElf(variant) === undefined ? {} : { largeElf: largeElf(variant) }) }
      const fsUrl = `file://${join(work, `store-${variant}`)}`
      const s3Url = `s3://${BUCKET}/${variant}`
      const targets = [{ url: fsUrl, store: openStore(fsUrl) }]
      if (engine !== undefined) targets.push({ url: s3Url, store: openStore(s3Url, { s3Endpoint: engine.endpoint, s3: { credentials: engine.credentials } }) })
      for (const t of targets) {
        const pushed = await pushImage(py.ociLayout, parseRef(IMAGE), { store: t.store, db: openMemoryNodeDb(), chunking })
        const layers = pushed.layers
        pushes[variant] = { tocBytes: 0, chunks: 0, storedBytes: layers.reduce((n, l) => n + l.storedBytes, 0) }
        for await (const key of t.store.list('layers/')) pushes[variant]!.tocBytes += (await t.store.get(key)).length
      }
      for (const c of CONFIGS) {
        const kb = c.readAheadKb
        const afterMount = kb === DAEMON_READ_AHEAD_KB ? undefined : async (home: string) => await setReadAhead(home, kb)
        const run = { work, image: IMAGE, workload: WORKLOAD, ...(afterMount === undefined ? {} : { afterMount }) }
        const env = { ...(c.neighbourKb === undefined ? {} : { LAYERD_PROBE_NEIGHBOUR_BYTES: String(c.neighbourKb * 1024) }), ...(c.fileHint ? {} : { LAYERD_PROBE_NO_FILE_HINT: '1' }), ...(c.bigPlain === true ? { LAYERD_PROBE_BIG_PLAIN_BYTES: String(MIN_ELF_BYTES) } : {}) }
        rows.push({ name: `${variant}, ${c.name}, fs`, variant, config: c.name, link: false, run: coldLayerdRun(run, 'api', { url: fsUrl, env }) })
        if (proxy !== undefined) rows.push({ name: `${variant}, ${c.name}, S3 through the link`, variant, config: c.name, link: true, run: coldLayerdRun(run, 'api', { url: s3Url, s3Endpoint: `http://${proxy.hostPort}`, env: { ...keys, ...env } }) })
      }
    }
    const samples = await runInterleaved(REPS, rows, s => `${fmt(s.totalSeconds)} s, ${fmt((s.fetchedBytes ?? NaN) / MB)} MB (${fmt((s.fetchedBytes ?? NaN) / (s.storedBytes ?? NaN) * 100, 1)}%), ${s.fetches ?? ''} GETs`, { rotate: true })
    const figures = rows.map(r => {
      const xs = samples.get(r.name)!
      const m = (f: (s: ColdSample) => number | undefined): number => median(xs.map(f).filter((v): v is number => v !== undefined))
      return { name: r.name, variant: r.variant, config: r.config, link: r.link, totalSeconds: m(s => s.totalSeconds), runSeconds: m(s => s.runSeconds), fetchedBytes: m(s => s.fetchedBytes), storedBytes: m(s => s.storedBytes), fetches: m(s => s.fetches), samples: xs }
    })
    const table = markdownTable(['variant', 'readahead', 'store', 'total s (median)', 'totals', 'MB fetched', '% of stored', 'GETs', 'stored MB', 'TOC KB'],
      figures.map(f => [f.variant, f.config, f.link ? 'S3, link' : 'fs', fmt(f.totalSeconds), f.samples.map(s => fmt(s.totalSeconds)).join(' / '), fmt(f.fetchedBytes / MB), fmt(f.fetchedBytes / f.storedBytes * 100, 1), String(f.fetches), fmt(f.storedBytes / MB), fmt(pushes[f.variant]!.tocBytes / 1e3, 0)]))
    const markdown = [
      `Workload: \`chroot ROOT ${WORKLOAD}\` in python-v1; ${REPS} interleaved reps (rotated), page cache dropped and a fresh LAYERD_HOME each; control API. ` +
        `Large ELF: files of at least ${MIN_ELF_BYTES / 1024} KiB starting with the ELF magic. Link rows: ${describeLink(LINK)}, s3rver.`,
      '',
      table
    ].join('\n')
    await writeReport({ name: 'elf-chunking', title: 'Chunking of large ELF files against bytes fetched (issue 15)', command, load: load.stop(), markdown, data: { reps: REPS, link: LINK, minElfBytes: MIN_ELF_BYTES, pushes, figures } }, ARGS.string('out'))
  } finally {
    await proxy?.close()
    await engine?.stop()
    await rm(work, { recursive: true, force: true })
  }
}

await main()
