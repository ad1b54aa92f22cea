/**
 * The chunk corpus of the cache benches (bench/cache.ts, bench/cache-writes.ts):
 * the regular files under some directories, cut per file with FastCDC
 * 16/64/256 KiB (as push cuts), each distinct chunk compressed once (zstd 3).
 *
 * Bench-only: may import anything.
 */
import { createHash } from 'node:crypto'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { Compressor } from 'zstd-napi'
import { FastCdcChunker } from '../src/format/chunker.js'

/** One distinct chunk: its sha256 (hex), plain bytes and zstd frame. */
export interface CorpusChunk { digest: string, plain: Buffer, frame: Buffer }

/** The non-empty regular files under `dir`, in sorted order, depth first; unreadable directories are skipped. */
export function * corpusFiles (dir: string): Generator<string> {
  let names: string[]
  try { names = readdirSync(dir).sort() } catch { return }
  for (const n of names) {
    const p = join(dir, n)
    const st = statSync(p, { throwIfNoEntry: false })
    if (st === undefined) continue
    if (st.isDirectory()) yield * corpusFiles(p)
    else if (st.isFile() && st.size > 0) yield p
  }
}

/**
 * Files of `sources` until `limitBytes` of distinct plain chunk bytes are
 * held: `files` lists each file's chunks in order, `chunks` the distinct
 * ones, first seen first. Sync.
 */
export function loadCorpus (sources: string[], limitBytes: number): { files: CorpusChunk[][], chunks: CorpusChunk[] } {
  const compressor = new Compressor()
  compressor.setParameters({ compressionLevel: 3 })
  const byDigest = new Map<string, CorpusChunk>()
  const files: CorpusChunk[][] = []
  let total = 0
  for (const src of sources) {
    for (const path of corpusFiles(src)) {
      if (total >= limitBytes) break
      let data: Buffer
      try { data = readFileSync(path) } catch { continue }
      const chunker = new FastCdcChunker({ minSize: 16 * 1024, avgSize: 64 * 1024, maxSize: 256 * 1024 })
      const pieces = chunker.push(data)
      const tail = chunker.flush()
      if (tail !== undefined) pieces.push(tail)
      const file: CorpusChunk[] = []
      for (const piece of pieces) {
        const plain = Buffer.from(piece)
        const digest = createHash('sha256').update(plain).digest('hex')
        let c = byDigest.get(digest)
        if (c === undefined) {
          c = { digest, plain, frame: compressor.compress(plain) }
          byDigest.set(digest, c)
          total += plain.length
        }
        file.push(c)
      }
      files.push(file)
    }
  }
  return { files, chunks: [...byDigest.values()] }
}
