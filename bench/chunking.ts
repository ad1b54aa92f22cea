/**
 * Chunking-strategy benchmark: which way of cutting layers into chunks gives
 * the best dedup, stored size, locality and speed on a real image series.
 *
 *   node dist/bench/chunking.js [--fixtures DIR | --image NAME=PATH[,PATH…]…] [--only A,B] [--json OUT]
 *
 * Default input: the Debian fixture series (bench/fixture-series.ts), built
 * on first use. `--fixtures DIR` reads a fixture build's manifest.json in
 * DIR; `--image` gives a series by hand (layer tars or directories).
 *
 * The series is pushed in order into an empty, simulated store, per
 * candidate: each distinct layer is chunked, every chunk sha256-hashed, and
 * new chunks zstd-compressed (level 3, one frame per chunk, as push does).
 * Layers already pushed (same digest) are skipped, as push skips them.
 * Prints a Markdown table and the command that reproduces it, and writes
 * the figures as JSON (default bench/results/chunking.json) and the table
 * as Markdown next to it (chunking.md).
 *
 * Bench-only: may import anything.
 */
import { createHash, randomFillSync } from 'node:crypto'
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Compressor } from 'zstd-napi'
import { describeError } from '../src/errors.js'
import { FastCdcChunker } from '../src/format/chunker.js'
import { candidates, type Candidate } from './chunking-strategies.js'
import { loadFixtureSeries } from './fixture-series.js'
import { loadSeries, type SeriesImage, type SeriesLayer } from './image-series.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const ZSTD_LEVEL = 3
const MB = 1e6
const MIB = 1024 * 1024
const CHUNK_TIMING_RUNS = 3
const SCAN_TIMING_RUNS = 5
const SCAN_RANDOM_BYTES = 64 * MIB
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

interface ImageFigures { image: string, newPlainBytes: number, newStoredBytes: number }

interface CandidateFigures {
  name: string
  describe: string
  /** Chunk references over all distinct layers, and distinct chunks among them. */
  chunkRefs: number
  uniqueChunks: number
  /** Logical bytes (distinct layers) / chunk references. */
  meanChunkBytes: number
  logicalBytes: number
  uniquePlainBytes: number
  /** logicalBytes / uniquePlainBytes. */
  dedupRatio: number
  /** Compressed bytes of all distinct chunks: what the store holds. */
  storedBytes: number
  perImage: ImageFigures[]
  /** Mean over non-empty files of (plain bytes of the chunks a full read fetches / file size). */
  readAmpPerFile: number
  /** Same, weighted by file size: total fetched / total file bytes. */
  readAmpByBytes: number
  /** Expected plain bytes fetched by a read of one random byte (4 KiB page) of file content: sum(len²)/sum(len) over chunk references. */
  randomReadFetchBytes: number
  chunkSeconds: number
  hashSeconds: number
  compressSeconds: number
  /** logicalBytes / chunkSeconds, MB/s. Seconds are CPU seconds of this (one-threaded) process. */
  chunkMBps: number
  /** logicalBytes / (chunk + hash + compress seconds), MB/s; only new chunks are compressed, as in push. */
  pipelineMBps: number
}

function measure (candidate: Candidate, series: SeriesImage[], compressor: Compressor): CandidateFigures {
  const store = new Map<string, number>() // digest → compressed length
  const pushedLayers = new Set<SeriesLayer>()
  const perImage: ImageFigures[] = []
  let chunkRefs = 0
  let logicalBytes = 0
  let uniquePlainBytes = 0
  let storedBytes = 0
  let ampSum = 0
  let ampFiles = 0
  let fetchedBytes = 0
  let sumSquares = 0
  let chunkSeconds = 0
  let hashSeconds = 0
  let compressSeconds = 0
  for (const image of series) {
    const fig: ImageFigures = { image: image.name, newPlainBytes: 0, newStoredBytes: 0 }
    for (const layer of image.layers) {
      if (pushedLayers.has(layer)) continue
      pushedLayers.add(layer)
      logicalBytes += layer.bytes
      const { chunks, files } = bestOf(CHUNK_TIMING_RUNS, () => candidate.chunkLayer(layer.files))
      chunkSeconds += bestOf.seconds
      chunkRefs += chunks.length
      for (const c of chunks) sumSquares += c.length * c.length
      for (const f of files) {
        let fetched = 0
        for (let k = f.first; k <= f.last; k++) fetched += chunks[k]!.length
        ampSum += fetched / f.size
        ampFiles++
        fetchedBytes += fetched
      }
      let t0 = cpuSeconds()
      const digests = chunks.map(c => createHash('sha256').update(c).digest('hex'))
      hashSeconds += cpuSeconds() - t0
      t0 = cpuSeconds()
      for (const [k, chunk] of chunks.entries()) {
        const digest = digests[k]!
        if (store.has(digest)) continue
        const compressed = compressor.compress(chunk).length
        store.set(digest, compressed)
        uniquePlainBytes += chunk.length
        storedBytes += compressed
        fig.newPlainBytes += chunk.length
        fig.newStoredBytes += compressed
      }
      compressSeconds += cpuSeconds() - t0
    }
    perImage.push(fig)
  }
  return {
    name: candidate.name,
    describe: candidate.describe,
    chunkRefs,
    uniqueChunks: store.size,
    meanChunkBytes: logicalBytes / chunkRefs,
    logicalBytes,
    uniquePlainBytes,
    dedupRatio: logicalBytes / uniquePlainBytes,
    storedBytes,
    perImage,
    readAmpPerFile: ampSum / ampFiles,
    readAmpByBytes: fetchedBytes / logicalBytes,
    randomReadFetchBytes: sumSquares / logicalBytes,
    chunkSeconds,
    hashSeconds,
    compressSeconds,
    chunkMBps: logicalBytes / MB / chunkSeconds,
    pipelineMBps: logicalBytes / MB / (chunkSeconds + hashSeconds + compressSeconds)
  }
}

/** CPU seconds (user + system) this process has used: robust to other processes competing for the 2 cores. */
function cpuSeconds (): number {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1e6
}

/** Run `fn` `runs` times; returns the last result and leaves the fastest run's CPU seconds in `bestOf.seconds`. */
function bestOf<T> (runs: number, fn: () => T): T {
  let best = Infinity
  let result: T | undefined
  for (let i = 0; i < runs; i++) {
    const t0 = cpuSeconds()
    result = fn()
    best = Math.min(best, cpuSeconds() - t0)
  }
  bestOf.seconds = best
  return result!
}
bestOf.seconds = 0

/**
 * Boundary-scan throughput of the bare FastCDC chunker, MB/s, best of
 * several runs: over `data` pushed in 1 MiB pieces (a stream) and over the
 * series' files one by one (per file: files under minSize cost nothing).
 */
function measureScan (pieces: Uint8Array[], avgSize: number, perFile: boolean): number {
  const bytes = pieces.reduce((n, p) => n + p.length, 0)
  bestOf(SCAN_TIMING_RUNS, () => {
    const chunker = new FastCdcChunker({ minSize: avgSize / 4, avgSize, maxSize: avgSize * 4 })
    for (const p of pieces) {
      chunker.push(p)
      if (perFile) chunker.flush()
    }
    chunker.flush()
  })
  return bytes / MB / bestOf.seconds
}

function randomPieces (bytes: number): Uint8Array[] {
  const pieces: Uint8Array[] = []
  for (let at = 0; at < bytes; at += MIB) pieces.push(randomFillSync(new Uint8Array(MIB)))
  return pieces
}

function table (results: CandidateFigures[], series: SeriesImage[]): string {
  const mb = (n: number, digits = 1): string => (n / MB).toFixed(digits)
  const later = series.slice(1).map(i => i.name)
  const rows = [
    `| strategy | chunks | mean chunk (KiB) | dedup ratio | stored (MB) | ${later.map(n => `new stored for ${n} (MB)`).join(' | ')} | ` +
      'read amp, per file | read amp, by bytes | fetch per random read (KiB) | chunk MB/s | chunk+sha256+zstd MB/s |',
    `|---|--:|--:|--:|--:|${later.map(() => '--:|').join('')}--:|--:|--:|--:|--:|`
  ]
  for (const r of results) {
    rows.push(`| ${r.name} | ${r.uniqueChunks} | ${(r.meanChunkBytes / 1024).toFixed(1)} | ${r.dedupRatio.toFixed(3)} | ${mb(r.storedBytes)} | ` +
      `${r.perImage.slice(1).map(i => mb(i.newStoredBytes, 2)).join(' | ')} | ` +
      `${r.readAmpPerFile.toFixed(1)} | ${r.readAmpByBytes.toFixed(2)} | ${(r.randomReadFetchBytes / 1024).toFixed(0)} | ${r.chunkMBps.toFixed(0)} | ${r.pipelineMBps.toFixed(0)} |`)
  }
  return rows.join('\n')
}

interface Args { fixtures?: string, images: string[], only?: string[], json: string }

const SPEC = {
  fixtures: { type: 'string', value: 'DIR' },
  image: { type: 'string', multiple: true, value: 'NAME=PATH[,PATH…]' },
  only: { type: 'string', value: 'A,B' },
  json: { type: 'string', default: resolve(REPO_ROOT, 'bench/results/chunking.json'), value: 'OUT' }
} satisfies BenchOptions

function parseArgs (): Args {
  const a = benchArgs('chunking', SPEC)
  const fixtures = a.optString('fixtures')
  const only = a.optString('only')
  return {
    ...(fixtures !== undefined ? { fixtures } : {}),
    images: a.list('image'),
    ...(only !== undefined ? { only: only.split(',') } : {}),
    json: resolve(a.string('json'))
  }
}

async function main (): Promise<void> {
  const args = parseArgs()
  let source = 'images given by --image'
  let series: SeriesImage[]
  if (args.images.length > 0) series = await loadSeries(args.images)
  else {
    const fixtures = await loadFixtureSeries(args.fixtures)
    series = fixtures.series
    source = `Debian fixture series in ${fixtures.dir}`
  }
  const distinct = [...new Set(series.flatMap(i => i.layers))]
  for (const image of series) {
    const files = image.layers.reduce((n, l) => n + l.files.length, 0)
    const bytes = image.layers.reduce((n, l) => n + l.bytes, 0)
    process.stderr.write(`${image.name}: ${image.layers.length} layer(s), ${files} files, ${(bytes / MB).toFixed(1)} MB\n`)
  }
  const compressor = new Compressor()
  compressor.setParameters({ compressionLevel: ZSTD_LEVEL })
  const random = randomPieces(SCAN_RANDOM_BYTES)
  const files = distinct.flatMap(l => l.files.map(f => f.data))
  const scanMBps = Object.fromEntries([16, 32, 64].map(k => [`avg ${k} KiB`, {
    randomStream: measureScan(random, k * 1024, false),
    seriesPerFile: measureScan(files, k * 1024, true)
  }]))
  const scanText = Object.entries(scanMBps).map(([k, v]) => `${k}: ${v.randomStream.toFixed(0)} MB/s on random bytes, ${v.seriesPerFile.toFixed(0)} MB/s on the series per file`).join('; ')
  process.stderr.write(`FastCDC boundary scan (best of ${SCAN_TIMING_RUNS}): ${scanText}\n`)
  const results: CandidateFigures[] = []
  for (const c of candidates()) {
    if (args.only !== undefined && !args.only.includes(c.name)) continue
    process.stderr.write(`${c.name}…`)
    const r = measure(c, series, compressor)
    process.stderr.write(` ${(r.storedBytes / MB).toFixed(1)} MB stored, ${r.pipelineMBps.toFixed(0)} MB/s\n`)
    results.push(r)
  }
  const command = `node dist/bench/chunking.js ${process.argv.slice(2).join(' ')}`.trim()
  const report = [
    table(results, series),
    '',
    `Series (${source}): ${series.map(i => `${i.name} (${i.layers.length} layer(s))`).join(', ')}; ` +
      `${distinct.length} distinct layers, ${(distinct.reduce((n, l) => n + l.bytes, 0) / MB).toFixed(1)} MB of file content. ` +
      `Pushed in that order; dedup ratio = file bytes of the distinct layers / plain bytes of distinct chunks; stored = zstd -${ZSTD_LEVEL} per chunk. ` +
      `Read amp = plain bytes of the chunks a whole-file read fetches / file size. Throughput in MB per CPU second, one thread.`,
    `FastCDC boundary scan alone (best of ${SCAN_TIMING_RUNS}): ${scanText}.`,
    '',
    `Reproduce: \`${command}\``
  ].join('\n')
  console.log(report)
  const doc = {
    command,
    source,
    date: new Date().toISOString(),
    node: process.version,
    zstdLevel: ZSTD_LEVEL,
    series: series.map(i => ({ name: i.name, layers: i.layers.map(l => ({ id: l.id, source: l.source, files: l.files.length, bytes: l.bytes })) })),
    scanMBps,
    results
  }
  await mkdir(dirname(args.json), { recursive: true })
  await writeFile(args.json, JSON.stringify(doc, null, 2) + '\n')
  const markdown = args.json.replace(/\.json$/, '') + '.md'
  await writeFile(markdown, report + '\n')
  console.log(`Figures written to ${args.json} and ${markdown}`)
}

main().catch(err => {
  process.stderr.write(`chunking bench: ${describeError(err)}\n`)
  process.exitCode = 1
})
