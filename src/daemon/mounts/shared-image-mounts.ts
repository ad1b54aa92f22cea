/**
 * Images mounted read-only for sandboxes, at `<sharedDir>/<manifest hex>`:
 * mounted on first use, shared by every sandbox of that manifest, kept until
 * the daemon stops, and recorded (shared-image-records.ts) for a restarted
 * daemon. Where it can be, an image is a stack (image-stacks.ts): its lower
 * layers' shared base, its top layer at `<mountpoint>.top`, and a read-only
 * overlay of the two at the mountpoint; else one merged mount.
 *
 * The mounts themselves are MountManager's (SharedImageHost): listed, counted
 * and unmounted like any mount.
 *
 * May import: src/format/, src/image/, src/fs/ (types), this folder.
 */
import { join, resolve } from 'node:path'
import { digestHex, isDigest, type Digest } from '../../format/digest.js'
import { splitTopLayer } from '../../format/layer-split.js'
import { parseRef } from '../../format/ref.js'
import type { LayerToc } from '../../format/toc.js'
import type { ImageMount } from '../../fs/image-mount.js'
import { mountedFsType } from '../../fs/fuse-binding.js'
import type { LoadedImage } from '../../image/load-image.js'
import { resolveRef } from '../../image/refs.js'
import type { MountInfo, SharedImage } from '../client/control-protocol.js'
import { mountStackOverlay, overlaySafePath, unmountStackOverlay, type ImageStacks } from './image-stacks.js'
import type { StackTop } from './layer-chains.js'
import type { PreparedTakeovers } from './prepared-takeovers.js'
import type { SharedImageRecord, SharedImageRecords } from './shared-image-records.js'
import { storeLocationOf, type StoreLocation, type StorePool } from '../reading/store-pool.js'
import type { LogLine } from '../../log-line.js'

/** What a shared image needs of one of the host's mounts. */
export interface SharedMount { info: MountInfo, image: LoadedImage, mount: ImageMount }

/** A request for one image at one mountpoint. */
export interface SharedMountRequest extends StoreLocation { image: string, mountpoint: string }

/** What shared images use of MountManager; `M`: the host's mounts. */
export interface SharedImageHost<M extends SharedMount> {
  stores: Pick<StorePool, 'get'>
  stacks: Pick<ImageStacks, 'acquireBase' | 'releaseBase'>
  records: SharedImageRecords
  /** The trees built ahead for a takeover (none outside one). */
  prepared: () => PreparedTakeovers
  /** Images as stacks where they can be (LAYERD_STACKS). */
  stackImages: boolean
  /** The image's manifest and TOCs, through the node's metadata cache. Async. */
  load: (loc: StoreLocation, image: string) => Promise<LoadedImage>
  /** The host's mount at `mountpoint`, if any. Sync. */
  mounted: (mountpoint: string) => SharedMount | undefined
  /** One merged mount of the whole image, as a plain mount is. Async. */
  mountMerged: (req: SharedMountRequest, loaded: LoadedImage) => Promise<MountInfo>
  /** One FUSE mount of `tocs` (the layers `layers` of `loaded`) at `mountpoint`, recorded as the host's mount; `top`: a stack's top. Async. */
  mountLayers: (loc: StoreLocation, mountpoint: string, name: string, loaded: LoadedImage, layers: Digest[], tocs: LayerToc[],
    top: StackTop | undefined, started: number) => Promise<M>
  /** Record `top`, the host's mount at `topPath`, as the stack at `mountpoint` over the base `baseKey`, with `info`. Sync. */
  recordStack: (top: M, topPath: string, mountpoint: string, info: MountInfo, baseKey: string) => void
  /** Unmount one of the host's mounts. Async. */
  unmount: (mountpoint: string) => Promise<void>
  log: LogLine
}

export class SharedImageMounts<M extends SharedMount> {
  readonly #host: SharedImageHost<M>
  readonly #sharedDir: string
  readonly #sharing = new Map<string, Promise<SharedImage>>()

  constructor (host: SharedImageHost<M>, sharedDir: string) {
    this.#host = host
    this.#sharedDir = sharedDir
  }

  /**
   * The image mounted read-only for sandboxes, at `<sharedDir>/<manifest hex>`,
   * mounting it on first use. Shared by every sandbox of that manifest and
   * kept until the daemon stops (a warm mount is what makes a start fast).
   * Concurrent calls for one image mount it once. Async.
   */
  async shared (req: StoreLocation & { image: string }): Promise<SharedImage> {
    const { store } = this.#host.stores.get(req)
    // Only the manifest digest is needed to find the mount: no TOC is read or decoded for a mounted image.
    const manifest = isDigest(req.image) ? req.image : await resolveRef(store, parseRef(req.image))
    const mountpoint = join(this.#sharedDir, digestHex(manifest))
    const existing = this.#host.mounted(mountpoint)
    if (existing !== undefined) return { mountpoint, manifest, config: existing.image.manifest.config, mountMs: 0 }
    let pending = this.#sharing.get(mountpoint)
    if (pending === undefined) {
      pending = this.#mountShared({ ...req, image: manifest, mountpoint })
        .then(info => {
          const m = this.#host.mounted(mountpoint)!
          m.info.image = req.image
          const record = this.#host.records.get(mountpoint)
          this.#host.records.put({ ...(record ?? recordOf({ ...req, image: manifest, mountpoint }, mountpoint)), image: req.image })
          return { mountpoint, manifest, config: m.image.manifest.config, mountMs: info.mountMs }
        })
        .finally(() => this.#sharing.delete(mountpoint))
      this.#sharing.set(mountpoint, pending)
    }
    return await pending
  }

  /**
   * A shared image as a stack (image-stacks.ts): its lower layers' shared
   * base, its top layer, and the read-only overlay of the two at
   * `req.mountpoint`; one merged mount when the top layer cannot be
   * stacked exactly or the path cannot go into overlay options. Async.
   */
  async #mountShared (req: SharedMountRequest): Promise<MountInfo> {
    const host = this.#host
    const started = performance.now()
    const mountpoint = resolve(req.mountpoint)
    const loc = storeLocationOf(req)
    const loaded = await host.load(loc, req.image)
    const layers = loaded.manifest.layers.map(l => l.digest)
    const topPath = `${mountpoint}.top`
    if (layers.length < 2 || !host.stackImages || !overlaySafePath(topPath) || !overlaySafePath(this.#sharedDir)) return await host.mountMerged(req, loaded)
    const { store, fetcher } = host.stores.get(loc)
    const base = await host.stacks.acquireBase(layers.slice(0, -1), loaded.tocs.slice(0, -1), fetcher, store.url, loc)
    const preparedTop = host.prepared().take(topPath, layers.slice(-1), layers.slice(0, -1))
    const split = preparedTop ?? splitTopLayer(base.tree, loaded.tocs.at(-1)!)
    if ('reason' in split) {
      host.log(`image ${req.image}: one merged mount, not a stack: ${split.reason}`)
      await host.stacks.releaseBase(base.key)
      return await host.mountMerged(req, loaded)
    }
    let top: M | undefined
    try {
      top = await host.mountLayers(loc, topPath, req.image, loaded, layers.slice(-1), loaded.tocs.slice(-1),
        { tree: split.tree, base: layers.slice(0, -1), ...(preparedTop === undefined ? {} : { prepared: preparedTop }) }, started)
      // A takeover of both FUSE mounts keeps the overlay above them (and the sandboxes' overlays above that) as it is.
      const overlay = await mountedFsType(mountpoint)
      if (!(overlay === 'overlay' && top.mount.adopted && base.mount.adopted)) {
        if (overlay !== undefined) await unmountStackOverlay(mountpoint)
        await mountStackOverlay(mountpoint, topPath, base.mountpoint)
      }
    } catch (err) {
      if (top !== undefined) await host.unmount(topPath).catch(() => {})
      await host.stacks.releaseBase(base.key)
      throw err
    }
    const info: MountInfo = { ...top.info, mountpoint, mountMs: performance.now() - started }
    host.recordStack(top, topPath, mountpoint, info, base.key)
    host.records.put({ ...recordOf(req, mountpoint), topPath: top.mount.mountpoint, basePath: base.mount.mountpoint })
    return info
  }
}

/** A shared image's record, before its stack's paths are known. */
function recordOf (req: SharedMountRequest, mountpoint: string): SharedImageRecord {
  return { mountpoint, image: req.image, manifest: req.image, ...storeLocationOf(req) }
}
