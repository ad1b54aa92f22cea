/**
 * Tar splits in the store (`tar-splits/<diff_id hex>`, src/format/tar-split.ts):
 * written by push next to a layer's TOC, read by export to write that
 * layer's original tar again, byte for byte.
 *
 * Keyed by diff_id, not by TOC: a split rebuilds the tar with that
 * diff_id from any TOC of that tar (hole for hole), wherever its chunks
 * live. It is not addressed by its own digest; what verifies it is the
 * rebuilt tar, whose sha256 must be the diff_id (export checks). gc keeps a
 * split while a live TOC has its diff_id.
 *
 * May import: src/errors.ts, src/format/, src/store/, this folder.
 */
import { NotFoundError } from '../errors.js'
import { digestHex, type Digest } from '../format/digest.js'
import { tarSplitKey } from '../format/keys.js'
import { decodeTarSplit, encodeTarSplit, mismatchWithToc, type TarSplit } from '../format/tar-split.js'
import type { LayerToc } from '../format/toc.js'
import type { ObjectStore } from '../store/object-store.js'
import type { StoreLease } from '../store/store-leases.js'
import { Compressor } from 'zstd-napi'
import { decompressMetadata } from './metadata-objects.js'

/**
 * zstd level 1, not metadata's 6: a split is mostly tar header blocks, and
 * on the python base layer (11.7 MB encoded) level 1 takes 5 ms for 230 KB
 * where level 6 takes 24–32 ms for 218 KB, on push's busiest thread.
 */
const TAR_SPLIT_ZSTD_LEVEL = 1
let compressor: Compressor | undefined

function compressTarSplit (plain: Uint8Array): Buffer {
  if (compressor === undefined) {
    compressor = new Compressor()
    compressor.setParameters({ compressionLevel: TAR_SPLIT_ZSTD_LEVEL })
  }
  return compressor.compress(plain)
}

/**
 * Store `split` for `toc`'s layer unless the store has one for its diff_id
 * (or has it condemned by a running gc: then again). Async; returns the
 * bytes written, 0 when none. Throws a plain Error (an internal bug) when
 * the split does not fit the TOC: a tar source must record exactly the TOC's
 * file contents as holes.
 */
export async function storeTarSplit (store: Pick<ObjectStore, 'put' | 'stat'>, lease: Pick<StoreLease, 'isCondemned'>, toc: LayerToc, split: TarSplit): Promise<number> {
  const mismatch = mismatchWithToc(split, toc)
  if (mismatch !== undefined) throw new Error(`internal: the tar split of layer ${toc.diffId} does not fit its TOC: ${mismatch}`)
  const key = tarSplitKey(digestHex(toc.diffId as Digest))
  if ((await store.stat(key)) !== undefined && !lease.isCondemned(key)) return 0
  const bytes = compressTarSplit(encodeTarSplit(split))
  await store.put(key, bytes)
  return bytes.length
}

/**
 * The split stored for `toc`'s diff_id, if there is one that fits `toc`.
 * Async. Undefined when none is stored (a layer pushed from a directory, or
 * before splits existed, or too large to keep one), and when the one stored
 * does not fit this TOC hole for hole (a TOC of the same tar read under
 * another ingest policy): export then writes the tar from the TOC. Throws
 * CorruptObjectError for one that does not decode.
 */
export async function loadTarSplit (store: Pick<ObjectStore, 'get' | 'url'>, toc: LayerToc): Promise<TarSplit | undefined> {
  const key = tarSplitKey(digestHex(toc.diffId as Digest))
  let stored: Buffer
  try { stored = await store.get(key) } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
  const source = `${key} in ${store.url}`
  const split = decodeTarSplit(decompressMetadata(stored, source), source)
  return mismatchWithToc(split, toc) === undefined ? split : undefined
}
