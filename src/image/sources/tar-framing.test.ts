/**
 * The tar split the framing guard records (src/format/tar-split.ts) does
 * not depend on how the stream is cut into chunks: headers, PAX records,
 * content, padding and the end marker split at any byte give the same
 * split, whose raw runs and holes add up to the tar and whose holes are
 * the content of the files (not of `.wh.*` markers).
 */
import t from 'tap'
import { buildLayerTar, dir, file, largeFile, sampleLayerEntries, whiteout } from '../../../fixtures/layer-dsl.js'
import { TarSplitBuilder, type TarSplit } from '../../format/tar-split.js'
import { TarFramingGuard } from './tar-framing.js'

function splitOf (tar: Buffer, chunkBytes: number): TarSplit {
  const split = new TarSplitBuilder(64 * 1024 * 1024)
  const guard = new TarFramingGuard({ layerName: 'test', maxEntryBytes: 2 ** 40, warn: () => {}, split })
  for (let at = 0; at < tar.length; at += chunkBytes) guard.push(tar.subarray(at, at + chunkBytes))
  guard.end()
  return split.result()!
}

const entries = [...sampleLayerEntries({ largeBytes: 70_001, sparseBytes: 64 * 1024 }), dir('w'), whiteout('w/gone'), largeFile('w/big', 1536)]
const tar = Buffer.concat([buildLayerTar(entries), Buffer.from('trailing bytes')])
const contentSizes = entries.filter(e => e.kind === 'file' && (e.content?.size ?? 0) > 0 && !/(^|\/)\.wh\./.test(e.path)).map(e => e.content!.size)

t.test('TarFramingGuard records the same split however the stream is cut', async t => {
  const whole = splitOf(tar, tar.length)
  t.same(whole.holes, contentSizes, 'one hole per file with content, in tar order')
  const rawBytes = whole.raw.reduce((n, r) => n + r.length, 0)
  t.equal(rawBytes + whole.holes.reduce((n, h) => n + h, 0), tar.length, 'raw runs and holes add up to the tar, trailing bytes included')
  t.ok(Buffer.from(whole.raw.at(-1)!).subarray(-14).equals(Buffer.from('trailing bytes')), 'bytes after the end marker are kept')
  for (const size of [1, 7, 511, 512, 513, 4096, 65_537]) {
    const cut = splitOf(tar, size)
    t.same(cut.holes, whole.holes, `${size}-byte chunks: the same holes`)
    t.ok(cut.raw.every((r, i) => Buffer.from(r).equals(Buffer.from(whole.raw[i]!))), `${size}-byte chunks: the same raw runs`)
  }
})

t.test('TarFramingGuard keeps the bytes of a .wh. marker with content, which no TOC keeps', async t => {
  const marker = file('d/.wh.x', 'not content a TOC keeps')
  const split = splitOf(buildLayerTar([dir('d'), marker]), 100)
  t.same(split.holes, [], 'no hole: its bytes stay raw')
})
