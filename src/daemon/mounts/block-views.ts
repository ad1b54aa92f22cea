/**
 * Block views for the VM tiers: an image's merged tree as a deterministic
 * raw ext4 file, chunked into the store like any layer and served through a
 * FUSE mount, so a VM reads (and the node fetches) only the blocks it
 * touches.
 *
 * A block view is built on the first VM request for an image (export the
 * merged tree, mkfs.ext4 -d, push the raw file as a one-file layer) and
 * stored: `block-views/<image manifest hex>` names a one-layer manifest
 * whose layer holds `disk.raw`. Every later request, from any node, mounts
 * it directly. The build is deterministic, so two nodes racing to build one
 * produce the same objects.
 *
 * May import: everything below src/daemon.
 */
import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { NotFoundError } from '../../errors.js'
import { buildBlockView } from '../../blockview/block-view-builder.js'
import { BLOCK_VIEW_FILE, pushBlockView } from '../../blockview/push-block-view.js'
import { digestHex, isDigest, type Digest } from '../../format/digest.js'
import { BLOCK_VIEWS_PREFIX, manifestKey } from '../../format/keys.js'
import { MANIFEST_MEDIA_TYPE, type ImageManifest } from '../../format/manifest.js'
import type { ChunkCache } from '../../cache/chunk-cache.js'
import { loadImage } from '../../image/load-image.js'
import { encodeManifestObject, getManifest } from '../../image/metadata-objects.js'
import { exportImage } from '../../materialize/export-image.js'
import type { NodeDb } from '../../state/node-db.js'
import type { ObjectStore } from '../../store/object-store.js'
import { withStoreLease, type StoreLease } from '../../store/store-leases.js'
import { guardReusedImage } from '../../image/reuse-guard.js'
import type { MountManager } from './mount-manager.js'
import type { StoreLocation, StorePool } from '../reading/store-pool.js'
import type { BlockViewInfo } from '../client/control-protocol.js'
import type { LogLine } from '../../log-line.js'

export { BLOCK_VIEWS_PREFIX }

export class BlockViews {
  readonly #building = new Map<string, Promise<Digest>>()

  constructor (
    private readonly mounts: MountManager,
    private readonly stores: StorePool,
    private readonly cache: ChunkCache,
    private readonly db: NodeDb,
    private readonly workDir: string,
    private readonly log: LogLine
  ) {}

  /** The block view of `req.image`, building and storing it first if needed, mounted. Async. */
  async ensure (req: StoreLocation & { image: string }): Promise<BlockViewInfo> {
    const { store, fetcher } = this.stores.get(req)
    const image = await loadImage(store, req.image, { cache: this.cache })
    const started = performance.now()
    let built = false
    let viewManifest = image.manifest.blockView === undefined ? await this.#stored(req, image.digest) : image.digest
    if (viewManifest === undefined) {
      let pending = this.#building.get(image.digest)
      if (pending === undefined) {
        pending = this.#build(req, image.digest, fetcher).finally(() => this.#building.delete(image.digest))
        this.#building.set(image.digest, pending)
      }
      viewManifest = await pending
      built = true
    }
    const shared = await this.mounts.shared({ ...req, image: viewManifest })
    return {
      path: join(shared.mountpoint, BLOCK_VIEW_FILE),
      manifest: image.digest,
      config: image.manifest.config,
      buildMs: built ? performance.now() - started : 0
    }
  }

  async #stored (req: StoreLocation, manifest: Digest): Promise<Digest | undefined> {
    const { store } = this.stores.get(req)
    try {
      const pointer = (await store.get(BLOCK_VIEWS_PREFIX + digestHex(manifest))).toString('utf8').trim()
      if (!isDigest(pointer)) return undefined
      const view = await getManifest(store, pointer) // verified; must be a block view
      return view.blockView === undefined ? undefined : pointer
    } catch (err) {
      if (err instanceof NotFoundError) return undefined
      throw err
    }
  }

  async #build (req: StoreLocation, manifest: Digest, fetcher: Parameters<typeof exportImage>[1]): Promise<Digest> {
    const { store } = this.stores.get(req)
    // The lease covers the build up to its commit point, the block-views/ pointer (src/gc/README.md).
    return await withStoreLease(store, `block view of ${manifest}`, async lease => await this.#buildLeased(store, lease, manifest, fetcher))
  }

  async #buildLeased (store: ObjectStore, lease: StoreLease, manifest: Digest, fetcher: Parameters<typeof exportImage>[1]): Promise<Digest> {
    const image = await loadImage(store, manifest, { cache: this.cache })
    const work = join(this.workDir, `block-view-${digestHex(manifest).slice(0, 16)}-${process.pid}-${Date.now()}`)
    await mkdir(work, { recursive: true, mode: 0o700 })
    try {
      this.log(`building the block view of ${manifest}`)
      await exportImage(image, fetcher, { directory: join(work, 'tree') })
      const raw = await buildBlockView(join(work, 'tree'), { uuidSeed: manifest, out: join(work, BLOCK_VIEW_FILE) })
      await guardReusedImage(store, lease, image, `block view of ${manifest}`)
      const pushed = await pushBlockView(raw.path, { store, db: this.db, lease })
      const view: ImageManifest = {
        mediaType: MANIFEST_MEDIA_TYPE,
        layers: [{ digest: pushed.digest, diffId: pushed.rawDigest, size: pushed.stats.plainBytes, storedBytes: pushed.stats.storedBytes, entries: pushed.stats.entries }],
        config: { ...image.manifest.config, rootfs: { type: 'layers', diff_ids: [pushed.rawDigest] } },
        blockView: pushed.digest
      }
      const object = encodeManifestObject(view)
      await store.put(manifestKey(digestHex(object.digest)), object.bytes)
      lease.assertValid()
      await store.put(BLOCK_VIEWS_PREFIX + digestHex(manifest), Buffer.from(object.digest))
      this.log(`block view of ${manifest}: ${raw.sizeBytes} bytes, ${pushed.stats.newStoredBytes} new bytes stored, as ${object.digest}`)
      return object.digest
    } finally {
      await rm(work, { recursive: true, force: true })
    }
  }
}
