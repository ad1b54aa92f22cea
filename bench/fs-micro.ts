/**
 * FUSE filesystem micro-benchmark: what a layerd mount costs per op, against
 * a trivial fuse-native filesystem (the PLATFORM.md baseline) measured in
 * the same run, interleaved, with the same mount options.
 *
 *   node dist/bench/fs-micro.js [--files N] [--big-mib N] [--reps N] [--json OUT]
 *
 * Builds in memory (MemoryImage, 64 KiB chunks like push's average):
 * - a tree of N small files (default 10,000; 100 per directory, 1–4 KiB);
 * - one big file (default 200 MiB).
 * Workloads (child processes against a mount served by this process):
 * - `ls -lR` and `find -ls` of the tree on a fresh mount (kernel caches
 *   empty), then again on the same mount (entries/attributes cached);
 *   layerd without xattrs, layerd with an xattr on every file, trivial;
 * - `cat` of every small file (open/read/release), fresh mount;
 * - `dd bs=1M` of the big file after dropping the page cache (every byte
 *   through FUSE), then again from the page cache; layerd with the
 *   in-memory reader (warm), layerd with ChunkFetcher + LmdbChunkCache
 *   (warm: the production read path), trivial.
 * Each figure is the median of --reps runs (default 5). Path ops served
 * (getattr, readdir, getxattr, reads without a handle…) are counted for layerd.
 *
 * Prints a Markdown table and the command; writes JSON (default
 * bench/results/fs-micro.json).
 *
 * Bench-only: may import anything.
 */
import { execFile } from 'node:child_process'
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'
import { ChunkFetcher } from '../src/cache/chunk-fetcher.js'
import { LmdbChunkCache } from '../src/cache/lmdb-chunk-cache.js'
import { MountChunkReader } from '../src/daemon/reading/mount-chunk-reader.js'
import { BlobNeighbours } from '../src/daemon/reading/blob-neighbours.js'
import type { ChunkReader } from '../src/fs/file-reader.js'
import { mountFuse, type FuseOperations, type FuseStat } from '../src/fs/fuse-binding.js'
import { DEFAULT_FUSE_OPTIONS, mountImage } from '../src/fs/image-mount.js'
import { MemoryChunkReader } from '../src/fs/memory-chunk-reader.js'
import { MemoryImage, patternBytes, type MemoryEntry } from '../src/fs/memory-image.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const sh = promisify(execFile)
const MIB = 1024 * 1024
const CHUNK_64KIB = 64 * 1024

const here = dirname(fileURLToPath(import.meta.url))
const SPEC = {
  files: { type: 'string', default: '10000', value: 'N' },
  'big-mib': { type: 'string', default: '200', value: 'N' },
  reps: { type: 'string', default: '5', value: 'N' },
  json: { type: 'string', default: join(here, '../../bench/results/fs-micro.json'), value: 'FILE' }
} satisfies BenchOptions
const ARGS = benchArgs('fs-micro', SPEC)
const FILES = ARGS.number('files', { min: 1 })
const BIG_MIB = ARGS.number('big-mib', { min: 1 })
const REPS = ARGS.number('reps', { min: 1 })
const JSON_OUT = resolve(ARGS.string('json'))

interface Row { workload: string, layerd: string, trivial: string, note: string }

/** A mounted filesystem under test: layerd, or the trivial baseline. */
interface Subject { dir: string, pathOps: () => number, unmount: () => Promise<void> }

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

interface Fixture { image: MemoryImage, xattrImage: MemoryImage, smallFiles: Map<string, Buffer>, big: Buffer }

function buildFixture (): Fixture {
  const smallFiles = new Map<string, Buffer>()
  for (let i = 0; i < FILES; i++) smallFiles.set(`tree/d${Math.floor(i / 100)}/file-${i}.txt`, patternBytes(1024 + (i % 4) * 1024, i + 1))
  const big = patternBytes(BIG_MIB * MIB, 7)
  const build = (xattrs: boolean): MemoryImage => {
    const image = new MemoryImage()
    const entries: MemoryEntry[] = [...smallFiles].map(([path, content]) =>
      ({ path, type: 'file', content, ...(xattrs ? { xattrs: { 'user.origin': Buffer.from('bench').toString('base64') } } : {}) }))
    image.addLayer(entries, { chunkSize: CHUNK_64KIB, stream: true })
    image.addLayer([{ path: 'big', type: 'file', content: big }], { chunkSize: CHUNK_64KIB })
    return image
  }
  return { image: build(false), xattrImage: build(true), smallFiles, big }
}

async function mountLayerd (dir: string, image: MemoryImage, reader: ChunkReader): Promise<Subject> {
  const m = await mountImage({ mountpoint: dir, tocs: image.tocs, reader, log: l => console.error(l) })
  // Every path-based op resolves its path once through nodeAt (which recurses for a new path: count the outer call).
  let pathOps = 0
  let depth = 0
  const view = m.view as unknown as { nodeAt: (p: string) => unknown }
  const nodeAt = view.nodeAt.bind(m.view)
  view.nodeAt = (p: string) => {
    if (depth === 0) pathOps++
    depth++
    try { return nodeAt(p) } finally { depth-- }
  }
  return { dir, pathOps: () => pathOps, unmount: m.unmount }
}

/** The baseline: a minimal fuse-native filesystem over Maps, same mount options. */
async function mountTrivial (dir: string, fx: Fixture): Promise<Subject> {
  const stats = new Map<string, FuseStat>()
  const listings = new Map<string, string[]>()
  const content = new Map<string, Buffer>([...[...fx.smallFiles].map(([p, d]) => [`/${p}`, d] as const), ['/big', fx.big]])
  let ino = 1
  const st = (mode: number, size: number): FuseStat => ({ mode, uid: 0, gid: 0, size, nlink: 1, ino: ino++, rdev: 0, blksize: 4096, blocks: Math.ceil(size / 512), atime: 0, mtime: 0, ctime: 0 })
  const addDir = (p: string): void => {
    if (stats.has(p)) return
    stats.set(p, st(0o40755, 4096))
    listings.set(p, [])
    if (p !== '/') {
      const parent = p.slice(0, p.lastIndexOf('/')) || '/'
      addDir(parent)
      listings.get(parent)!.push(p.slice(p.lastIndexOf('/') + 1))
    }
  }
  addDir('/')
  for (const [p, data] of content) {
    const parent = p.slice(0, p.lastIndexOf('/')) || '/'
    addDir(parent)
    listings.get(parent)!.push(p.slice(p.lastIndexOf('/') + 1))
    stats.set(p, st(0o100644, data.length))
  }
  const ENOENT = -2
  const ops = {
    getattr (p: string, cb: (err: number, s?: FuseStat) => void) { const s = stats.get(p); if (s === undefined) cb(ENOENT); else cb(0, s) },
    readdir (p: string, cb: (err: number, names?: string[]) => void) { cb(0, listings.get(p)) },
    open (p: string, flags: number, cb: (err: number, fd?: number) => void) { cb(0, 0) },
    release (p: string, fd: number, cb: (err: number) => void) { cb(0) },
    read (p: string, fd: number, buf: Buffer, len: number, pos: number, cb: (n: number) => void) {
      const data = content.get(p)!
      const n = Math.max(0, Math.min(len, data.length - pos))
      data.copy(buf, 0, pos, pos + n)
      cb(n)
    }
  }
  await mkdir(dir, { recursive: true })
  const m = await mountFuse(dir, ops as unknown as FuseOperations, DEFAULT_FUSE_OPTIONS)
  return { dir, pathOps: () => NaN, unmount: m.unmount }
}

async function seconds (cmd: string): Promise<number> {
  const start = process.hrtime.bigint()
  await sh('sh', ['-c', cmd], { maxBuffer: 256 * MIB })
  return Number(process.hrtime.bigint() - start) / 1e9
}

/** dd's own throughput figure in GB/s (excludes process start). */
async function ddGBps (path: string): Promise<number> {
  const { stderr } = await sh('dd', [`if=${path}`, 'of=/dev/null', 'bs=1M'])
  const m = /copied, ([0-9.]+) s/.exec(stderr)
  return (BIG_MIB * MIB) / Number(m![1]) / 1e9
}

async function dropPageCache (): Promise<void> {
  await sh('sh', ['-c', 'sync; echo 1 > /proc/sys/vm/drop_caches'])
}

async function main (): Promise<void> {
  const base = await mkdtemp(join(tmpdir(), 'layerd-fs-micro-'))
  let mounts = 0
  const fresh = (): string => join(base, `m${++mounts}`)
  const built = Date.now()
  const fx = buildFixture()
  console.error(`built: ${FILES} small files, one ${BIG_MIB} MiB file, ${fx.image.chunks.size} chunks, in ${Date.now() - built} ms`)
  const warm = (image: MemoryImage): MemoryChunkReader => new MemoryChunkReader({ store: image.chunks, warm: true })
  const entries = FILES + Math.ceil(FILES / 100) + 1
  const rows: Row[] = []
  const fmtS = (xs: number[]): string => `${median(xs).toFixed(3)} s`

  // Metadata walks, fresh mount each rep; the second run on the same mount is kernel-cached.
  for (const [tool, cmd] of [['ls -lR', 'ls -lR DIR/tree > /dev/null'], ['find -ls', 'find DIR/tree -ls > /dev/null']] as const) {
    const res = { layerd: { cold: [] as number[], cached: [] as number[], ops: [] as number[] }, xattr: { cold: [] as number[], cached: [] as number[], ops: [] as number[] }, trivial: { cold: [] as number[], cached: [] as number[], ops: [] as number[] } }
    for (let r = 0; r < REPS; r++) {
      for (const kind of ['layerd', 'xattr', 'trivial'] as const) {
        const s = kind === 'trivial' ? await mountTrivial(fresh(), fx) : await mountLayerd(fresh(), kind === 'xattr' ? fx.xattrImage : fx.image, warm(fx.image))
        try {
          res[kind].cold.push(await seconds(cmd.replace('DIR', s.dir)))
          res[kind].ops.push(s.pathOps())
          res[kind].cached.push(await seconds(cmd.replace('DIR', s.dir)))
        } finally { await s.unmount() }
      }
    }
    rows.push({ workload: `${tool}, ${entries} entries, fresh mount`, layerd: `${fmtS(res.layerd.cold)} (${median(res.layerd.ops)} path ops)`, trivial: fmtS(res.trivial.cold), note: `PLATFORM.md: ls -l of 10,000 files 0.75–0.8 s` })
    rows.push({ workload: `${tool}, same mount again (kernel-cached)`, layerd: fmtS(res.layerd.cached), trivial: fmtS(res.trivial.cached), note: 'PLATFORM.md: 0.04 s cached' })
    rows.push({ workload: `${tool}, fresh mount, an xattr on every file`, layerd: `${fmtS(res.xattr.cold)} (${median(res.xattr.ops)} path ops)`, trivial: '', note: 'ls -l asks 2 xattrs per file' })
    rows.push({ workload: `${tool}, kernel-cached, an xattr on every file`, layerd: fmtS(res.xattr.cached), trivial: '', note: '' })
  }

  // Small files: open/read/release each, fresh mount.
  {
    const layerd: number[] = []
    const trivial: number[] = []
    await writeFile(join(base, 'files.txt'), [...fx.smallFiles.keys()].join('\n') + '\n')
    for (let r = 0; r < REPS; r++) {
      for (const kind of ['layerd', 'trivial'] as const) {
        const s = kind === 'trivial' ? await mountTrivial(fresh(), fx) : await mountLayerd(fresh(), fx.image, warm(fx.image))
        try {
          ;(kind === 'layerd' ? layerd : trivial).push(await seconds(`cd ${s.dir} && xargs -d '\\n' cat < ${join(base, 'files.txt')} > /dev/null`))
        } finally { await s.unmount() }
      }
    }
    const per = (xs: number[]): string => `${fmtS(xs)}, ${Math.round(median(xs) / FILES * 1e6)} µs/file`
    rows.push({ workload: `cat ${FILES} small files, fresh mount`, layerd: per(layerd), trivial: per(trivial), note: 'PLATFORM.md: 1.4–2.0 s' })
  }

  // Sequential read: one mount per subject, page cache dropped before each rep.
  const cacheDir = join(base, 'lmdb')
  await mkdir(cacheDir)
  const cache = LmdbChunkCache.open(cacheDir, { maintenanceIntervalMs: 0, noSync: true })
  for (const [digest, data] of fx.image.chunks) await cache.put(digest, data, { verified: true })
  const fetcher = new ChunkFetcher({ url: 'memory://none', remote: false, getRange: async () => { throw new Error('a warm benchmark must not fetch') } }, cache)
  const subjects = {
    memory: await mountLayerd(fresh(), fx.image, warm(fx.image)),
    lmdb: await mountLayerd(fresh(), fx.image, new MountChunkReader(fetcher, 'memory://none', {
      onPrefetchError: () => {},
      neighbours: () => new BlobNeighbours(fx.image.tocs),
      isCached: digest => cache.has(digest)
    })),
    trivial: await mountTrivial(fresh(), fx)
  }
  const through = { memory: [] as number[], lmdb: [] as number[], trivial: [] as number[] }
  const cached = { memory: [] as number[], lmdb: [] as number[], trivial: [] as number[] }
  try {
    for (let r = 0; r < REPS; r++) {
      for (const kind of ['memory', 'lmdb', 'trivial'] as const) {
        await dropPageCache()
        through[kind].push(await ddGBps(join(subjects[kind].dir, 'big')))
        cached[kind].push(await ddGBps(join(subjects[kind].dir, 'big')))
      }
    }
  } finally {
    for (const s of Object.values(subjects)) await s.unmount()
    await fetcher.close()
    await cache.close()
  }
  const gb = (xs: number[]): string => `${median(xs).toFixed(2)} GB/s`
  rows.push({ workload: `dd ${BIG_MIB} MiB, page cache dropped (in-memory reader, warm)`, layerd: gb(through.memory), trivial: gb(through.trivial), note: 'PLATFORM.md: 1.6–1.9 GB/s' })
  rows.push({ workload: `dd ${BIG_MIB} MiB, page cache dropped (ChunkFetcher + LmdbChunkCache, warm)`, layerd: gb(through.lmdb), trivial: gb(through.trivial), note: '' })
  rows.push({ workload: `dd ${BIG_MIB} MiB again, from the page cache`, layerd: `${gb(cached.memory)} / ${gb(cached.lmdb)}`, trivial: gb(cached.trivial), note: 'PLATFORM.md: ≈9.5 GB/s' })
  await rm(base, { recursive: true, force: true })

  const command = `node dist/bench/fs-micro.js --files ${FILES} --big-mib ${BIG_MIB} --reps ${REPS}`
  const load = loadavg().map(x => x.toFixed(1)).join(' ')
  console.log(`\n${command}   (medians of ${REPS}; load average at the end: ${load})\n`)
  console.log('| workload | layerd | trivial fuse-native FS, same run | note |')
  console.log('|---|---|---|---|')
  for (const r of rows) console.log(`| ${r.workload} | ${r.layerd} | ${r.trivial} | ${r.note} |`)
  await mkdir(dirname(JSON_OUT), { recursive: true })
  await writeFile(JSON_OUT, JSON.stringify({ command, date: new Date().toISOString(), loadAverage: load, files: FILES, bigMiB: BIG_MIB, reps: REPS, rows }, null, 2) + '\n')
  console.error(`wrote ${JSON_OUT}`)
}

await main()
