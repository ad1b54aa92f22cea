/**
 * Write amplification of the node chunk cache: bytes that reach the disk
 * per plain byte the cache keeps, on the fetcher's real path.
 *
 *   node dist/bench/cache-writes.js [--source DIR[,DIR…]] [--mib N] [--readers N]
 *                                   [--sync] [--write-delay-ms N] [--writeback-ms N] [--read-gap-ms N] [--disk-dir DIR] [--out DIR]
 *
 * Input: real files (default this repo's node_modules, i.e. npm package
 * trees like the deploy benchmark's task images, then /usr/lib/python3*),
 * in path order up to N MiB (default 48), cut the way push cuts them
 * (per-file FastCDC 16/64/256 KiB: a small file is one chunk), one zstd-3
 * frame per chunk, packed into 32 MiB blobs of an FsObjectStore (on the
 * root filesystem, not measured).
 *
 * The cache (LmdbChunkCache, as the daemon opens it) lives on a fresh
 * loop-mounted ext4 disk of its own (bench/deploy/node-disk.ts), so the
 * device's count of written sectors is the cache's alone. Phases:
 * 1. cold: R readers (default 16) read the files in turn, one read() per
 *    file as FUSE would, through ChunkFetcher; then the fetcher is idle;
 * 2. warm: the same reads again (all hits), then the maintenance timer's
 *    work (access times saved) and close().
 * --read-gap-ms N: each reader pauses N ms after each file (a task that
 * does something with what it read), spreading the inserts over time.
 * --sync: lmdb-js overlappingSync instead of noSync. --writeback-ms N: a
 * syncfs every N ms while the phases run, the worst case of kernel
 * writeback for a noSync cache (Linux writes a dirty page back once it is
 * 30 s old, so pages rewritten within 30 s normally reach the disk once;
 * a run this short would otherwise hide the cost of rewriting them). Each phase reports /proc/self/io write_bytes (pages this process dirtied,
 * lmdb's writer thread included), the device's written sectors after
 * syncfs, and the cache's kept bytes.
 *
 * Bench-only: may import anything.
 */
import { createHash } from 'node:crypto'
import { readdirSync } from 'node:fs'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ChunkFetcher, newFetchStats } from '../src/cache/chunk-fetcher.js'
import { LmdbChunkCache } from '../src/cache/lmdb-chunk-cache.js'
import { blobKey } from '../src/format/keys.js'
import type { ChunkRef } from '../src/format/toc.js'
import { FsObjectStore } from '../src/store/fs-object-store.js'
import { loadCorpus, type CorpusChunk } from './bench-corpus.js'
import { fmt, REPORT_OPTIONS, markdownTable, MB, MIB, REPO_ROOT, startLoadSampler, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'
import { runCommand } from '../fixtures/run-command.js'
import { NodeDisk } from './deploy/node-disk.js'

const BLOB_TARGET_BYTES = 32 * MIB
const DISK_BYTES = 4 * 1024 * MIB
const SPEC = {
  source: { type: 'string', value: 'DIR,DIR…' },
  mib: { type: 'string', default: '48', value: 'N' },
  readers: { type: 'string', default: '16', value: 'N' },
  sync: { type: 'boolean' },
  'write-delay-ms': { type: 'string', default: '250', value: 'MS' },
  'writeback-ms': { type: 'string', default: '0', value: 'MS' },
  'read-gap-ms': { type: 'string', default: '0', value: 'MS' },
  work: { type: 'string', default: '/var/tmp', value: 'DIR' },
  'disk-dir': { type: 'string', value: 'DIR' },
  ...REPORT_OPTIONS
} satisfies BenchOptions
const ARGS = benchArgs('cache-writes', SPEC)

type Chunk = CorpusChunk
/** One file: the refs a read of it asks for. */
type FileRefs = ChunkRef[]

async function rssAnonBytes (): Promise<number> {
  const m = /^RssAnon:\s+(\d+) kB$/m.exec(await readFile('/proc/self/status', 'utf8'))
  return Number(m![1]) * 1024
}

async function writeBytes (): Promise<number> {
  const m = /^write_bytes:\s+(\d+)$/m.exec(await readFile('/proc/self/io', 'utf8'))
  return Number(m![1])
}

interface PhaseFigures { phase: string, seconds: number, processWriteBytes: number, deviceWrittenBytes: number, keptBytes: number, diskBytes: number, chunks: number, rssAnonBytes: number }

async function main (): Promise<void> {
  const pythons = readdirSync('/usr/lib').filter(n => /^python3(\.\d+)?$/.test(n)).map(n => `/usr/lib/${n}`)
  const sources = (ARGS.optString('source') ?? [join(REPO_ROOT, 'node_modules'), ...pythons].join(',')).split(',')
  const mib = ARGS.number('mib', { min: 1 })
  const readers = ARGS.number('readers', { min: 1 })
  const noSync = !ARGS.flag('sync')
  const writeDelayMs = ARGS.number('write-delay-ms')
  const writebackMs = ARGS.number('writeback-ms')
  const readGapMs = ARGS.number('read-gap-ms')
  const command = `node dist/bench/cache-writes.js --mib ${mib} --readers ${readers} --write-delay-ms ${writeDelayMs}${noSync ? '' : ' --sync'}${writebackMs > 0 ? ` --writeback-ms ${writebackMs}` : ''}${readGapMs > 0 ? ` --read-gap-ms ${readGapMs}` : ''}`
  console.error(command)
  const load = startLoadSampler()

  const { files, chunks } = loadCorpus(sources, mib * MIB)
  const plainBytes = chunks.reduce((n, c) => n + c.plain.length, 0)
  const sizes = chunks.map(c => c.plain.length).sort((a, b) => a - b)
  console.error(`  ${files.length} files, ${chunks.length} distinct chunks, ${fmt(plainBytes / MB, 1)} MB plain, median chunk ${fmt(sizes[sizes.length >> 1]! / 1024, 1)} KiB`)

  const work = await mkdtemp(join(ARGS.string('work'), 'layerd-bench-cache-writes-'))
  const disk = await NodeDisk.create(join(ARGS.optString('disk-dir') ?? work, 'node'), DISK_BYTES)
  try {
    // ---- the store: frames packed into blobs in file order (what push does)
    const store = new FsObjectStore(join(work, 'store'), { fsync: false })
    const refOf = new Map<string, ChunkRef>()
    let parts: Buffer[] = []
    let members: Array<{ c: Chunk, offset: number }> = []
    let pos = 0
    const flushBlob = async (): Promise<void> => {
      if (parts.length === 0) return
      const bytes = Buffer.concat(parts)
      const blob = createHash('sha256').update(bytes).digest('hex')
      await store.put(blobKey(blob), bytes)
      for (const { c, offset } of members) refOf.set(c.digest, { digest: c.digest, blob, offset, compressedLength: c.frame.length, length: c.plain.length })
      parts = []; members = []; pos = 0
    }
    for (const file of files) {
      for (const c of file) {
        if (refOf.has(c.digest) || members.some(m => m.c === c)) continue
        parts.push(c.frame); members.push({ c, offset: pos }); pos += c.frame.length
        if (pos >= BLOB_TARGET_BYTES) await flushBlob()
      }
    }
    await flushBlob()
    const fileRefs: FileRefs[] = files.map(f => f.map(c => refOf.get(c.digest)!))

    // ---- the cache on its own disk, opened as the daemon opens it
    const cacheDir = join(disk.mountpoint, 'cache')
    await disk.markBaseline()
    const cache = LmdbChunkCache.open(cacheDir, { noSync, writeDelayMs })
    const fetcher = new ChunkFetcher(store, cache)
    const stats = newFetchStats()
    const readAll = async (): Promise<void> => {
      let next = 0
      await Promise.all(Array.from({ length: readers }, async () => {
        while (next < fileRefs.length) {
          const refs = fileRefs[next++]!
          await fetcher.read(refs, { stats })
          if (readGapMs > 0) await new Promise(resolve => setTimeout(resolve, readGapMs))
        }
      }))
    }
    const figures: PhaseFigures[] = []
    const phase = async (name: string, fn: () => Promise<void>): Promise<void> => {
      const d0 = await disk.figures()
      const w0 = await writeBytes()
      const t0 = performance.now()
      let syncing = Promise.resolve()
      const writeback = writebackMs > 0 ? setInterval(() => { syncing = syncing.then(async () => { await runCommand('sync', ['-f', disk.mountpoint]) }) }, writebackMs) : undefined
      await fn()
      clearInterval(writeback)
      await syncing
      const seconds = (performance.now() - t0) / 1000
      const w1 = await writeBytes()
      const writtenBytes = (await disk.figures()).writtenBytes - d0.writtenBytes
      const s = cache.stats()
      const rssAnon = await rssAnonBytes()
      figures.push({ phase: name, seconds, processWriteBytes: w1 - w0, deviceWrittenBytes: writtenBytes, keptBytes: s.bytes, diskBytes: s.diskBytes, chunks: s.chunks, rssAnonBytes: rssAnon })
      console.error(`  ${name}: ${fmt(seconds, 2)} s, process write_bytes ${fmt((w1 - w0) / MB, 1)} MB, device ${fmt(writtenBytes / MB, 1)} MB, kept ${fmt(s.bytes / MB, 1)} MB in ${s.chunks} chunks, lmdb file ${fmt(s.diskBytes / MB, 1)} MB, RssAnon ${fmt(rssAnon / MB, 1)} MB`)
    }
    await phase('cold read (fetch + insert)', async () => { await readAll(); await fetcher.idle() })
    let closed = false
    await phase('warm read, then close (access times saved)', async () => {
      await readAll()
      await fetcher.close()
      await cache.close()
      closed = true
    })
    if (!closed) await cache.close()
    await store.close()

    // ---- everything kept survived close, byte for byte
    const again = LmdbChunkCache.open(cacheDir, { maintenanceIntervalMs: 0 })
    let bad = 0
    for (const c of chunks) if (again.get(c.digest)?.equals(c.plain) !== true) bad++
    const reopened = again.stats()
    await again.close()
    if (bad > 0) throw new Error(`${bad} of ${chunks.length} chunks missing or wrong after reopen`)
    const total = await disk.figures()
    console.error(`  reopened: all ${chunks.length} chunks served, ${fmt(reopened.bytes / MB, 1)} MB; lmdb file ${fmt(reopened.diskBytes / MB, 1)} MB; device written since the cache was opened ${fmt(total.writtenBytes / MB, 1)} MB`)

    const rows = figures.map(f => [
      f.phase, fmt(f.seconds, 2), fmt(f.processWriteBytes / MB, 1), fmt(f.deviceWrittenBytes / MB, 1),
      fmt(f.deviceWrittenBytes / plainBytes, 2), fmt(f.keptBytes / MB, 1), fmt(f.diskBytes / MB, 1)
    ])
    const markdown = [
      `${files.length} files (${sources.join(', ')}), ${chunks.length} distinct chunks, ${fmt(plainBytes / MB, 1)} MB plain ` +
        `(median chunk ${fmt(sizes[sizes.length >> 1]! / 1024, 1)} KiB), ${readers} readers, one read() per file, ` +
        `cache ${noSync ? 'noSync' : 'overlappingSync'}, write delay ${writeDelayMs} ms, on its own loop-mounted ext4 disk${writebackMs > 0 ? `, syncfs every ${writebackMs} ms` : ''}${readGapMs > 0 ? `, ${readGapMs} ms pause after each file` : ''}. MB = 10^6 bytes.`,
      '',
      markdownTable(['phase', 's', 'process write_bytes (MB)', 'device written (MB)', 'device ÷ plain inserted', 'kept (MB)', 'lmdb file (MB)'], rows)
    ].join('\n')
    await writeReport({ name: 'cache-writes', title: 'Chunk cache write amplification', command, load: load.stop(), markdown, data: { plainBytes, chunks: chunks.length, files: files.length, readers, noSync, figures } }, ARGS.string('out'))
  } finally {
    await disk.destroy()
    await rm(work, { recursive: true, force: true })
  }
}

await main()
