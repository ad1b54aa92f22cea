import t from 'tap'
import { createHash } from 'node:crypto'
import { seededBytes } from '../../fixtures/seeded-bytes.js'
import { UsageError } from '../errors.js'
import { chunkBuffer, DEFAULT_FASTCDC_OPTIONS, FastCdcChunker, JsCdcScanner, type Chunker } from './chunker.js'
import { ELF_MAGIC, fileChunker, isElfHead, type LargeElfChunking } from './file-chunkers.js'

const KIB = 1024
const SCANNER = new JsCdcScanner()
const SMALL_CDC: LargeElfChunking = { minFileBytes: 1024 * KIB, cdc: { minSize: 4 * KIB, avgSize: 16 * KIB, maxSize: 64 * KIB } }
const FIXED_16K: LargeElfChunking = { minFileBytes: 1024 * KIB, fixedBytes: 16 * KIB }

/** Seeded bytes of `size` whose first bytes are the ELF magic (an ELF file as far as chunking can tell). */
function elfBytes (seed: string, size: number): Uint8Array {
  const bytes = new Uint8Array(seededBytes(seed, size))
  bytes.set(ELF_MAGIC)
  return bytes
}

/** Every chunk of `data` through `chunker`, pushed in pieces of `pieceBytes` (copied out). */
function chunksOf (chunker: Chunker, data: Uint8Array, pieceBytes: number): Uint8Array[] {
  const out: Uint8Array[] = []
  for (let at = 0; at < data.length; at += pieceBytes) for (const c of chunker.push(data.subarray(at, at + pieceBytes))) out.push(c.slice())
  const last = chunker.flush()
  if (last !== undefined) out.push(last.slice())
  return out
}

const digests = (chunks: Uint8Array[]): string[] => chunks.map(c => createHash('sha256').update(c).digest('hex'))
const defaultChunks = (data: Uint8Array): string[] => digests(chunkBuffer(new FastCdcChunker(DEFAULT_FASTCDC_OPTIONS), data).map(c => c.slice()))

t.test('isElfHead() is true only for the ELF magic', async t => {
  t.ok(isElfHead(Uint8Array.of(0x7f, 0x45, 0x4c, 0x46, 2)))
  t.notOk(isElfHead(Uint8Array.of(0x7f, 0x45, 0x4c)), 'too short')
  t.notOk(isElfHead(new TextEncoder().encode('#!/bin/sh\n')))
})

t.test('fileChunker() gives every file the default chunks without large-ELF chunking', async t => {
  const data = elfBytes('elf', 2048 * KIB)
  t.same(digests(chunksOf(fileChunker(data.length, DEFAULT_FASTCDC_OPTIONS, SCANNER), data, 300 * KIB)), defaultChunks(data))
})

for (const [name, largeElf] of [['FastCDC 4/16/64 KiB', SMALL_CDC], ['fixed 16 KiB', FIXED_16K]] as const) {
  t.test(`fileChunker() with ${name} cuts a large ELF file smaller, the same whatever the pieces`, async t => {
    const data = elfBytes('elf', 2048 * KIB)
    const whole = chunksOf(fileChunker(data.length, DEFAULT_FASTCDC_OPTIONS, SCANNER, largeElf), data, data.length)
    const mean = data.length / whole.length
    t.ok(mean < 24 * KIB, `small chunks (mean ${Math.round(mean)} bytes)`)
    t.same(Buffer.concat(whole), Buffer.from(data), 'chunks concatenate to the file')
    for (const piece of [1, 3, 4, 5, 4096, 70_001]) {
      t.same(digests(chunksOf(fileChunker(data.length, DEFAULT_FASTCDC_OPTIONS, SCANNER, largeElf), data, piece)), digests(whole), `${piece}-byte pieces`)
    }
    if ('fixedBytes' in largeElf) t.same(whole.slice(0, -1).map(c => c.length), whole.slice(0, -1).map(() => largeElf.fixedBytes), 'every chunk but the last at a 16 KiB file offset')
  })

  t.test(`fileChunker() with ${name} keeps the default chunks for other files and small ELF files`, async t => {
    const big = new Uint8Array(seededBytes('data', 2048 * KIB))
    t.notOk(isElfHead(big))
    t.same(digests(chunksOf(fileChunker(big.length, DEFAULT_FASTCDC_OPTIONS, SCANNER, largeElf), big, 1)), defaultChunks(big), 'a large file that is not ELF, in 1-byte pieces')
    const small = elfBytes('small', 1024 * KIB - 1)
    t.same(digests(chunksOf(fileChunker(small.length, DEFAULT_FASTCDC_OPTIONS, SCANNER, largeElf), small, 4096)), defaultChunks(small), 'an ELF file one byte under minFileBytes')
  })
}

t.test('fileChunker() refuses large-ELF sizes that cannot work, naming them', async t => {
  t.throws(() => fileChunker(5000, DEFAULT_FASTCDC_OPTIONS, SCANNER, { minFileBytes: 2, fixedBytes: 4096 }), UsageError)
  t.throws(() => fileChunker(5000, DEFAULT_FASTCDC_OPTIONS, SCANNER, { minFileBytes: 4096, fixedBytes: 16 }), /fixed chunks must be at least 64 bytes, not 16/)
  t.throws(() => fileChunker(5000, DEFAULT_FASTCDC_OPTIONS, SCANNER, { minFileBytes: 4096, cdc: { minSize: 4096, avgSize: 3000, maxSize: 9000 } }), /FastCDC sizes/)
})
