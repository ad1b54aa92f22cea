import t from 'tap'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { seededBytes } from '../../fixtures/seeded-bytes.js'
import { DEFAULT_FASTCDC_OPTIONS, FastCdcChunker, JsCdcScanner, type CdcScanner, type FastCdcOptions } from '../format/chunker.js'
import { nativeCdcScanner } from './native-cdc-scanner.js'

/** Every chunk's length and sha256, feeding `data` in pieces of the sizes `sizes` cycles through. */
function cuts (scanner: CdcScanner, opts: FastCdcOptions, data: Uint8Array, sizes: number[]): string[] {
  const chunker = new FastCdcChunker(opts, scanner)
  const out: string[] = []
  const note = (c: Uint8Array): void => { out.push(`${c.length}:${createHash('sha256').update(c).digest('hex')}`) }
  for (let at = 0, i = 0; at < data.length; i++) {
    const end = Math.min(data.length, at + sizes[i % sizes.length]!)
    chunker.push(data.subarray(at, end)).forEach(note)
    at = end
  }
  const last = chunker.flush()
  if (last !== undefined) note(last)
  return out
}

t.test('the native FastCDC scan cuts exactly where the JS reference does', async t => {
  const native = nativeCdcScanner()
  if (native === undefined) throw new Error('the native addon is not built (npm run build)')
  const js = new JsCdcScanner()
  // Random bytes, and real text (a file of this repository, repeated): different hash behaviour.
  const inputs = [seededBytes('cdc-a', 3 * 1024 * 1024 + 123), Buffer.concat(Array(40).fill(readFileSync(new URL(import.meta.url))))]
  const optionSets: FastCdcOptions[] = [DEFAULT_FASTCDC_OPTIONS, { minSize: 64, avgSize: 256, maxSize: 1024 }, { minSize: 16 * 1024, avgSize: 64 * 1024, maxSize: 256 * 1024 }]
  const splits = [[1 << 30], [1, 4096, 70_001], [8192], [131_072, 3]]
  for (const [i, data] of inputs.entries()) {
    for (const opts of optionSets) {
      for (const sizes of splits) {
        const expected = cuts(js, opts, data, sizes)
        t.same(cuts(native, opts, data, sizes), expected, `input ${i}, sizes ${opts.minSize}/${opts.avgSize}/${opts.maxSize}, pieces ${sizes.join(',')}: ${expected.length} chunks`)
      }
    }
  }
})

t.test('the native FastCDC scan refuses arguments of the wrong type', async t => {
  const { nativeFastCdcNext } = await import('../native.js')
  const next = nativeFastCdcNext()
  t.throws(() => next(new Uint8Array(10), 0, new Int32Array(1), new Int32Array(5), new Int32Array(256)), /bad arguments/)
  t.throws(() => next(new Uint8Array(10), 11, new Int32Array(2), new Int32Array(5), new Int32Array(256)), /bad arguments/)
  t.throws(() => next(new Uint16Array(10) as unknown as Uint8Array, 0, new Int32Array(2), new Int32Array(5), new Int32Array(256)), /wrong argument type/)
})
