/**
 * Chunks a block view (raw ext4 file) into the store as a one-file layer:
 * a TOC holding the root directory and `disk.raw`, whose content goes
 * through the same chunker, dedup index and blob packer as every layer. Its
 * TOC digest is what `manifest.blockView` names; layerd then serves
 * `disk.raw` through FUSE like any file, fetching only the chunks a VM reads.
 *
 * The headroom of a block view is a hole, so it reads as zeros: those cut
 * into identical maximum-size chunks, stored once.
 *
 * May import: src/errors.ts, src/format/, src/store/, src/state/, src/image/.
 */
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { stat } from 'node:fs/promises'
import { BadInputError } from '../errors.js'
import type { Digest } from '../format/digest.js'
import type { ObjectStore } from '../store/object-store.js'
import type { StoreLease } from '../store/store-leases.js'
import type { NodeDb } from '../state/node-db.js'
import { BlobPacker } from '../image/blob-packer.js'
import { ChunkingPool, DEFAULT_CHUNKING } from '../image/chunking-pool.js'
import { ChunkIndex } from '../image/chunk-index.js'
import type { ChunkingParams } from '../image/file-chunking.js'
import type { LayerWriteStats } from '../image/layer-writer.js'
import { pushLayer } from '../image/push-layer.js'
import { grewError, shrankError } from '../image/sources/exact-file.js'
import type { LayerEntry, LayerSource } from '../image/sources/image-source.js'

/** The block view's file name inside its layer. */
export const BLOCK_VIEW_FILE = 'disk.raw'
const READ_CHUNK_BYTES = 1024 * 1024
/** The file is read-only for everyone: a VM opens it only as the backing of its overlay. */
const BLOCK_VIEW_MODE = 0o444

export interface PushBlockViewOptions {
  store: ObjectStore
  db: NodeDb
  /** Chunk sizes and zstd level; default: push's (DEFAULT_CHUNKING). */
  chunking?: ChunkingParams
  /** Encoder worker threads; 0 encodes inline. */
  workers?: number
  /** The caller's store lease: no dedup against blobs a running gc condemned (src/store/store-leases.ts). */
  lease: StoreLease
}

export interface PushedBlockView {
  /** Digest of the layer TOC: the value for `manifest.blockView`. */
  digest: Digest
  /** sha256 of the raw file, also recorded as the layer's diffId. */
  rawDigest: Digest
  sizeBytes: number
  /** True when the TOC was already in the store (this exact block view was pushed before). */
  existed: boolean
  stats: LayerWriteStats
}

/** A LayerSource of one read-only file, `disk.raw`, hashing the bytes as they stream by. */
class BlockViewSource implements LayerSource {
  readonly name: string
  readonly #path: string
  readonly #size: number
  readonly #hash = createHash('sha256')
  #digest: Digest | undefined

  constructor (path: string, size: number) {
    this.name = `block view ${path}`
    this.#path = path
    this.#size = size
  }

  async * entries (): AsyncGenerator<LayerEntry> {
    yield { header: { path: '', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 0, size: 0 } }
    yield { header: { path: BLOCK_VIEW_FILE, type: 'file', mode: BLOCK_VIEW_MODE, uid: 0, gid: 0, mtime: 0, size: this.#size }, body: this.#body() }
  }

  async * #body (): AsyncGenerator<Uint8Array> {
    let read = 0
    for await (const piece of createReadStream(this.#path, { highWaterMark: READ_CHUNK_BYTES }) as AsyncIterable<Buffer>) {
      read += piece.length
      if (read > this.#size) throw grewError(this.name, this.#size)
      this.#hash.update(piece)
      yield piece
    }
    if (read !== this.#size) throw shrankError(this.name, this.#size, read)
    this.#digest = `sha256:${this.#hash.digest('hex')}`
  }

  diffId (): Digest {
    if (this.#digest === undefined) throw new BadInputError(`${this.name}: diffId() before the content was read`)
    return this.#digest
  }
}

/**
 * Push the raw file at `rawPath` as a one-file layer and store its TOC.
 * Async. Resolves with the TOC digest to record as `manifest.blockView`.
 * Throws what the store throws, BadInputError if the file changes meanwhile.
 */
export async function pushBlockView (rawPath: string, opts: PushBlockViewOptions): Promise<PushedBlockView> {
  const { store } = opts
  const size = (await stat(rawPath)).size
  const source = new BlockViewSource(rawPath, size)
  const index = new ChunkIndex(opts.db, store.url)
  await index.sync(store, { excludeBlobs: opts.lease.condemnedBlobs() })
  const chunking = new ChunkingPool({ params: opts.chunking ?? DEFAULT_CHUNKING, ...(opts.workers === undefined ? {} : { workers: opts.workers }) })
  const packer = new BlobPacker(store, index)
  try {
    const { digest, existed, stats } = await pushLayer(source, { store, lease: opts.lease, chunking, packer, index, session: new Map() })
    return { digest, rawDigest: source.diffId(), sizeBytes: size, existed, stats }
  } finally {
    await chunking.close()
  }
}
