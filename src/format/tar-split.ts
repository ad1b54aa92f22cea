/**
 * Tar split: what a layer's TOC does not keep of its original tar, so that
 * export can write that tar again byte for byte (and so with the same
 * diff_id). A tar is header blocks, extension (PAX, GNU long name) blocks,
 * file content, padding, the end-of-archive marker and whatever followed
 * it; the TOC holds the file content (as chunks) and the meaning of the
 * headers, but not a tar writer's choices: field formats, PAX records,
 * padding bytes, the marker's length. The split keeps every byte of the
 * tar except file content, and a hole of N bytes where content was:
 *
 *   raw[0] hole[0] raw[1] hole[1] … hole[n-1] raw[n]
 *
 * The holes are, in order, the content of the TOC's regular files with a
 * non-zero size, in TOC order (`contentEntries`); `matchesToc` checks that
 * before a split is stored. Rebuilding is checked end to end: the written
 * tar's sha256 must be the diff_id the split is stored under.
 *
 * Encoding (before the store's zstd): the magic `LDTSPLIT1\n`, a u32 LE
 * hole count n, then 2n+1 float64 LE lengths (raw[0], hole[0], …, raw[n]),
 * then the raw bytes, concatenated. `decodeTarSplit` treats its input as
 * hostile.
 *
 * Pure: no fs, network or native code.
 */
import { CorruptObjectError } from '../errors.js'
import type { LayerToc, TocEntry } from './toc.js'

export interface TarSplit {
  /** Sizes of the content holes, in order (each > 0). */
  holes: number[]
  /** The raw runs around the holes: `holes.length + 1` of them (possibly empty). */
  raw: Uint8Array[]
}

const MAGIC = Buffer.from('LDTSPLIT1\n')
/** A split object larger than this (decoded) is refused: a corrupt or hostile store. */
export const MAX_TAR_SPLIT_BYTES = 1024 ** 3

/** The TOC entries whose content fills the holes of that layer's split, in order. Pure. */
export function contentEntries (toc: LayerToc): TocEntry[] {
  return toc.entries.filter(e => e.type === 'file' && e.size > 0)
}

/** Why `split` cannot rebuild a tar from `toc`'s content, or undefined when it can (hole for hole). Pure. */
export function mismatchWithToc (split: TarSplit, toc: LayerToc): string | undefined {
  const files = contentEntries(toc)
  if (files.length !== split.holes.length) return `it has ${split.holes.length} content holes, the TOC ${files.length} files with content`
  for (const [i, e] of files.entries()) {
    if (e.size !== split.holes[i]) return `hole ${i} is ${split.holes[i]} bytes, but ${JSON.stringify(e.path)} is ${e.size}`
  }
  return undefined
}

export function encodeTarSplit (split: TarSplit): Buffer {
  if (split.raw.length !== split.holes.length + 1) throw new RangeError(`tar split: ${split.raw.length} raw runs for ${split.holes.length} holes`)
  const lengths = Buffer.alloc(8 * (2 * split.holes.length + 1))
  let at = 0
  for (const [i, r] of split.raw.entries()) {
    lengths.writeDoubleLE(r.length, at); at += 8
    if (i < split.holes.length) { lengths.writeDoubleLE(split.holes[i]!, at); at += 8 }
  }
  const count = Buffer.alloc(4)
  count.writeUInt32LE(split.holes.length)
  return Buffer.concat([MAGIC, count, lengths, ...split.raw])
}

/** Decode a stored split. Sync; throws CorruptObjectError naming `source` on any inconsistency. */
export function decodeTarSplit (bytes: Uint8Array, source: string): TarSplit {
  const fail = (why: string): never => { throw new CorruptObjectError(`tar split ${source} is invalid: ${why}`) }
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (b.length < MAGIC.length + 4 || !b.subarray(0, MAGIC.length).equals(MAGIC)) fail('bad magic')
  const n = b.readUInt32LE(MAGIC.length)
  let at = MAGIC.length + 4
  if (b.length < at + 8 * (2 * n + 1)) fail(`too short for ${n} holes`)
  const rawLengths: number[] = []
  const holes: number[] = []
  for (let i = 0; i < 2 * n + 1; i++) {
    const v = b.readDoubleLE(at); at += 8
    if (!Number.isSafeInteger(v) || v < 0 || (i % 2 === 1 && v === 0)) fail(`length ${i} is ${v}`)
    if (i % 2 === 0) rawLengths.push(v); else holes.push(v)
  }
  const rawTotal = rawLengths.reduce((s, v) => s + v, 0)
  if (b.length - at !== rawTotal) fail(`the lengths name ${rawTotal} raw bytes, but ${b.length - at} follow`)
  const raw = rawLengths.map(len => { const r = b.subarray(at, at + len); at += len; return r })
  return { holes, raw }
}

/**
 * Collects a split while a tar streams past: `raw()` for bytes kept, `hole()`
 * where file content is left out. The raw bytes are copied into one buffer
 * that grows by doubling (no allocation per header: this runs on push's
 * busiest thread, once or twice per tar entry). Gives up (and `result()` is
 * undefined) once more than `maxRawBytes` raw bytes were kept, so memory
 * stays bounded for any layer; `gaveUp` says so.
 */
export class TarSplitBuilder {
  readonly #maxRawBytes: number
  readonly #holes: number[] = []
  /** Where each hole sits in the raw bytes. */
  readonly #holeAt: number[] = []
  #buf: Buffer = Buffer.allocUnsafe(64 * 1024)
  #length = 0
  gaveUp = false

  constructor (maxRawBytes: number) {
    this.#maxRawBytes = maxRawBytes
  }

  /** Keep a copy of `bytes` (the caller may reuse its buffer). */
  raw (bytes: Uint8Array): void {
    if (this.gaveUp || bytes.length === 0) return
    const need = this.#length + bytes.length
    if (need > this.#maxRawBytes) { this.gaveUp = true; this.#buf = Buffer.alloc(0); return }
    if (need > this.#buf.length) {
      const grown = Buffer.allocUnsafe(Math.min(this.#maxRawBytes, Math.max(need, 2 * this.#buf.length)))
      this.#buf.copy(grown, 0, 0, this.#length)
      this.#buf = grown
    }
    this.#buf.set(bytes, this.#length)
    this.#length = need
  }

  /** `size` bytes of file content (> 0) come here. */
  hole (size: number): void {
    if (this.gaveUp) return
    this.#holes.push(size)
    this.#holeAt.push(this.#length)
  }

  /** The split so far; its raw runs are views of this builder's buffer. */
  result (): TarSplit | undefined {
    if (this.gaveUp) return undefined
    const raw: Uint8Array[] = []
    let from = 0
    for (const at of [...this.#holeAt, this.#length]) { raw.push(this.#buf.subarray(from, at)); from = at }
    return { holes: [...this.#holes], raw }
  }
}
