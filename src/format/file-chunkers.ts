/**
 * Which chunker a file's bytes get. Every file gets per-file FastCDC with
 * the default sizes, except, when a {@link LargeElfChunking} is given, a
 * large ELF file (an executable or shared library of at least
 * `minFileBytes`): the loader maps those and a run touches scattered pages
 * of them, so a lazy read fetches whole chunks around each touched page.
 * Smaller chunks there fetch fewer bytes per touched page; small files
 * keep the default (one or a few chunks, read whole anyway).
 *
 * The choice depends only on the file's size and its first four bytes
 * (the ELF magic), never on how the bytes arrive in pieces, so the same
 * file always gets the same chunks (dedup across versions: content-defined
 * boundaries with FastCDC, fixed ones at file offsets otherwise).
 *
 * Pure: no fs, network or native code. Imports only errors and chunker.ts.
 */
import { UsageError } from '../errors.js'
import { FastCdcChunker, FixedSizeChunker, type CdcScanner, type Chunker, type FastCdcOptions } from './chunker.js'

/** The first bytes of every ELF file: 0x7f 'E' 'L' 'F'. */
export const ELF_MAGIC = Uint8Array.of(0x7f, 0x45, 0x4c, 0x46)

/** The smallest fixed chunk for large ELF files: as FastCDC's least minSize, so no chunk ends inside the magic. */
const MIN_FIXED_BYTES = 64

/** How large ELF files are chunked: FastCDC with `cdc`, or (`fixedBytes`) every so many bytes from the file's start. */
export type LargeElfChunking =
  | { minFileBytes: number, cdc: FastCdcOptions }
  | { minFileBytes: number, fixedBytes: number }

/** Whether `head` (a file's first bytes, at least four of them) starts with the ELF magic. Sync. */
export function isElfHead (head: Uint8Array): boolean {
  return head.length >= ELF_MAGIC.length && ELF_MAGIC.every((b, i) => head[i] === b)
}

/**
 * The chunker for one file of `size` bytes. Sync. Throws UsageError when a
 * size in `largeElf` cannot work (see FastCdcChunker, FixedSizeChunker).
 */
export function fileChunker (size: number, cdc: FastCdcOptions, scanner: CdcScanner, largeElf?: LargeElfChunking): Chunker {
  if (largeElf === undefined || size < largeElf.minFileBytes) return new FastCdcChunker(cdc, scanner)
  if (!Number.isSafeInteger(largeElf.minFileBytes) || largeElf.minFileBytes < ELF_MAGIC.length) {
    throw new UsageError(`large-ELF chunking needs minFileBytes >= ${ELF_MAGIC.length}, not ${largeElf.minFileBytes}`)
  }
  if ('fixedBytes' in largeElf && !(largeElf.fixedBytes >= MIN_FIXED_BYTES)) throw new UsageError(`large-ELF fixed chunks must be at least ${MIN_FIXED_BYTES} bytes, not ${largeElf.fixedBytes}`)
  // Made before the head is seen, so that bad sizes throw here, not at some later push.
  const elf: Chunker = 'cdc' in largeElf ? new FastCdcChunker(largeElf.cdc, scanner) : new FixedSizeChunker(largeElf.fixedBytes)
  return new HeadChoiceChunker(head => isElfHead(head) ? elf : new FastCdcChunker(cdc, scanner))
}

/**
 * A chunker that picks its inner chunker once it has seen the stream's
 * first ELF_MAGIC.length bytes (held as a copy until then: at most four
 * bytes, and FastCDC never cuts that early), then passes everything on.
 */
class HeadChoiceChunker implements Chunker {
  readonly #choose: (head: Uint8Array) => Chunker
  #inner: Chunker | undefined
  #head: Uint8Array = new Uint8Array(0)

  constructor (choose: (head: Uint8Array) => Chunker) {
    this.#choose = choose
  }

  push (data: Uint8Array): Uint8Array[] {
    if (this.#inner !== undefined) return this.#inner.push(data)
    const need = ELF_MAGIC.length - this.#head.length
    if (data.length < need) {
      this.#head = concat(this.#head, data)
      return []
    }
    this.#inner = this.#choose(concat(this.#head, data.subarray(0, need)))
    const held = this.#head
    this.#head = new Uint8Array(0)
    if (held.length === 0) return this.#inner.push(data)
    const out = this.#inner.push(held)
    for (const c of this.#inner.push(data)) out.push(c)
    return out
  }

  flush (): Uint8Array | undefined {
    const inner = this.#inner ?? (this.#head.length > 0 ? this.#choose(this.#head) : undefined)
    if (inner === undefined) return undefined
    if (this.#inner === undefined) inner.push(this.#head)
    this.#inner = undefined
    this.#head = new Uint8Array(0)
    return inner.flush()
  }

  detach (): void {
    this.#inner?.detach()
  }
}

function concat (a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length)
  out.set(a)
  out.set(b, a.length)
  return out
}
