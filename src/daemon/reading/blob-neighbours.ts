/**
 * Blob-neighbour readahead. Push packs a layer's chunks into blobs in tar
 * order, so the chunks right after a missed one in its blob are, most
 * often, the next files of the same directory: what a tree walk, an import
 * or a `git status` reads next. Fetching them in the same range GET costs a
 * few more bytes and saves one round trip per small file — the cost that
 * dominates cold starts on S3 (one GET per small file otherwise).
 *
 * May import: src/format/.
 */
import { resolveChunk, type ChunkRef, type LayerToc } from '../../format/toc.js'

/**
 * How far past a missed chunk, in compressed bytes of its blob, a demand
 * read extends. Measured on python-v1 (cold cache, fs store): with 0, 32,
 * 64 and 128 KiB, `import json, sqlite3, ssl` fetched 8.5/9.5/10.3/11.7 MB
 * in 98/93/76/90 GETs, and a read of every file under
 * /usr/lib/python3.11 took 1114/220/148/89 GETs. 64 KiB keeps the import
 * under 15% of the image and cuts a tree walk's round trips ~7x.
 */
export const NEIGHBOUR_READAHEAD_BYTES = 64 * 1024

/**
 * The same for a remote store (S3): there a range GET costs a round trip
 * and a request on both ends, so one read should reach further. Measured
 * with the deploy bench, layerd on S3, one node (1 Gbit/s, 1 ms RTT):
 * 64 KiB: 829 GETs, 37.9 MB, 14.3 s; 256 KiB: 395 GETs, 44.0 MB, 11.8 s.
 */
export const REMOTE_NEIGHBOUR_READAHEAD_BYTES = 256 * 1024

/** The readahead budget for chunks of a store that is `remote` (its ObjectStore capability) or not. */
export function neighbourBudget (remote: boolean): number {
  return remote ? REMOTE_NEIGHBOUR_READAHEAD_BYTES : NEIGHBOUR_READAHEAD_BYTES
}

export class BlobNeighbours {
  readonly #byBlob = new Map<string, ChunkRef[]>()
  readonly #position = new Map<string, number>()

  /** Index every chunk of the image by blob, in offset order. Sync. */
  constructor (tocs: readonly LayerToc[]) {
    for (const toc of tocs) {
      for (let i = 0; i < toc.chunks.length; i++) {
        const ref = resolveChunk(toc, i)
        let list = this.#byBlob.get(ref.blob)
        if (list === undefined) { list = []; this.#byBlob.set(ref.blob, list) }
        list.push(ref)
      }
    }
    for (const list of this.#byBlob.values()) {
      list.sort((a, b) => a.offset - b.offset)
      list.forEach((r, i) => { if (!this.#position.has(r.digest)) this.#position.set(r.digest, i) })
    }
  }

  /**
   * The chunks to fetch along with `missed`: those that follow each missed
   * chunk in its blob, up to `budgetBytes` compressed, skipping chunks that
   * `isCached` or that are already asked for. Sync.
   */
  extend (missed: readonly ChunkRef[], isCached: (digest: string) => boolean, budgetBytes = NEIGHBOUR_READAHEAD_BYTES): ChunkRef[] {
    const wanted = new Set(missed.map(r => r.digest))
    const extra: ChunkRef[] = []
    for (const ref of missed) {
      const list = this.#byBlob.get(ref.blob)
      const at = this.#position.get(ref.digest)
      if (list === undefined || at === undefined) continue
      let budget = budgetBytes
      for (let j = at + 1; j < list.length; j++) {
        const next = list[j]!
        budget -= next.compressedLength
        if (budget < 0) break
        if (wanted.has(next.digest) || isCached(next.digest)) continue
        wanted.add(next.digest)
        extra.push(next)
      }
    }
    return extra
  }
}
