/**
 * The daemon's mounts: image → FUSE mount at a directory, recorded in the
 * node database so a restarted daemon can clean what a killed one left
 * (dead mountpoints answer ENOTCONN) and mount it again.
 *
 * Images mounted for sandboxes (shared()) are stacks where they can be
 * (image-stacks.ts): a base shared by every image on the same lower
 * layers, the top layer, and a read-only overlay of the two.
 *
 * Takeover (src/holder/README.md): with a HeldConnections keeper, every
 * FUSE connection is kept outside the daemon, and recover() serves the
 * ones an earlier daemon kept: the same mounts and shared images, re-created
 * through the same code (so the same metadata tables, which the FUSE layer
 * checks), on the kept connections instead of new mounts.
 *
 * Metadata of mounted images is pinned in the cache; chunks are not.
 * Decoded layer TOCs are shared by every mount that uses the layer
 * (shared-tocs.ts): images on one base hold the base's TOCs once.
 *
 * May import: src/errors.ts, src/format/, src/image/, src/cache/, src/fs/, src/state/,
 * src/host/mount-table.ts, this folder.
 */
import { realpath } from 'node:fs/promises'
import { basename, join, resolve } from 'node:path'
import { NotFoundError, UsageError } from '../errors.js'
import { digestHex, isDigest, sha256Digest, type Digest } from '../format/digest.js'
import { layerKey, manifestKey } from '../format/keys.js'
import { parseRef } from '../format/ref.js'
import { resolveChunk, type ChunkRef } from '../format/toc.js'
import { MANIFEST_MEDIA_TYPE } from '../format/manifest.js'
import type { ChunkCache } from '../cache/chunk-cache.js'
import type { PrefetchResult } from '../cache/chunk-fetcher.js'
import { canonicalPath, fuseOptions, mountImage, type ImageMount } from '../fs/image-mount.js'
import type { FuseBackend } from '../fs/fuse-binding.js'
import { lazyUnmount, mountedFsType } from '../fs/fuse-binding.js'
import { loadImage, loadLayerTocs, type LoadedImage } from '../image/load-image.js'
import { resolveRef } from '../image/refs.js'
import { getPublishedTrace, putPublishedTrace } from '../image/published-traces.js'
import type { NodeDb } from '../state/node-db.js'
import { MountTable } from '../state/mount-table.js'
import { MountChunkReader } from './mount-chunk-reader.js'
import { BlobNeighbours } from './blob-neighbours.js'
import { AccessTraces, prefetchOrder } from './access-traces.js'
import { SharedTocs } from './shared-tocs.js'
import { ImageStacks, mountStackOverlay, overlaySafePath, unmountStackOverlay } from './image-stacks.js'
import { splitTopLayer } from '../format/layer-split.js'
import type { MergedTree } from '../format/merge.js'
import type { LayerToc } from '../format/toc.js'
import { mountsUnder } from '../host/mount-table.js'
import type { StoreLocation, StorePool } from './store-pool.js'
import type { HeldConnections } from '../holder/connection-keeper.js'
import { SharedImageRecords } from './shared-image-records.js'
import { PreparedTakeovers } from './prepared-takeovers.js'
import type { PreparedTree } from '../fs/image-mount.js'
import type { MountInfo, MountStats, SharedImage } from './control-protocol.js'

/** A stacked layer chain's top layer is fetched whole at mount up to this many stored (compressed) bytes (#prefetchSmallTop). */
const TOP_LAYER_PREFETCH_MAX_BYTES = 16 * 1024 * 1024

/** How images are mounted (settings resolved at the root: LAYERD_STACKS, LAYERD_TOP_PREFETCH, LAYERD_FUSE_BACKEND). */
export interface MountOptions {
  /** Images for sandboxes, and containerd layer chains, as stacks where they can be. Default true. */
  stacks?: boolean
  /** A stacked layer chain's small top layer fetched whole at mount (#prefetchSmallTop). Default true. */
  topLayerPrefetch?: boolean
  /** Who serves the FUSE mounts; default: the kernel backend when it can. */
  fuseBackend?: FuseBackend
}

export interface MountRequest extends StoreLocation { image: string, mountpoint: string }

interface Mounted {
  info: MountInfo
  mount: ImageMount
  reader: MountChunkReader
  image: LoadedImage
  layers: Digest[]
  pins: string[]
  loc: StoreLocation
  /** A shared image served as a stack: info.mountpoint is the overlay, `mount` its top layer. */
  stack?: { topPath: string, baseKey: string }
  /** A layer chain served stacked (mountLayerChain): `mount` is its top layer alone, over this shared base; no overlay of ours. */
  chainBase?: { key: string, mountpoint: string }
}

export class MountManager {
  readonly #rows: MountTable
  readonly #cache: ChunkCache
  readonly #stores: StorePool
  readonly #log: (line: string) => void
  readonly #mounts = new Map<string, Mounted>()
  readonly #sharedDir: string
  readonly #traces: AccessTraces
  readonly #sharing = new Map<string, Promise<SharedImage>>()
  readonly #tocs = new SharedTocs()
  readonly #stacks: ImageStacks
  readonly #keeper: HeldConnections | undefined
  readonly #sharedRecords: SharedImageRecords

  readonly #options: MountOptions
  /** Trees and tables built ahead for the kept connections (a planned restart); none otherwise. */
  #prepared: PreparedTakeovers

  /**
   * `sharedDir`: where images mounted for sandboxes live, one directory per
   * manifest; `sharedRecordsFile`: where they are recorded for a restarted
   * daemon; `keeper`: keeps FUSE connections across daemon restarts (none:
   * mounts die with the daemon); `prepared`: the kept connections' trees,
   * built ahead (prepared-takeovers.ts), used by recover() and dropped after
   * releaseUntakenConnections(); stacks and FUSE backend: MountOptions.
   */
  constructor (db: NodeDb, cache: ChunkCache, stores: StorePool, log: (line: string) => void, sharedDir: string,
    options: MountOptions & { keeper?: HeldConnections, sharedRecordsFile?: string, prepared?: PreparedTakeovers } = {}) {
    this.#sharedDir = sharedDir
    this.#options = options
    this.#keeper = options.keeper
    this.#prepared = options.prepared ?? PreparedTakeovers.none()
    this.#sharedRecords = new SharedImageRecords(options.sharedRecordsFile ?? `${sharedDir}.json`, log)
    this.#stacks = new ImageStacks(cache, this.#tocs, sharedDir, log, options.keeper, options.fuseBackend, () => this.#prepared)
    this.#traces = new AccessTraces(db)
    this.#rows = new MountTable(db)
    this.#cache = cache
    this.#stores = stores
    this.#log = log
  }

  /** Mount an image. Async. Throws NotFoundError for an unknown image, UsageError when the directory is already a layerd mount. */
  async mount (req: MountRequest, preloaded?: LoadedImage): Promise<MountInfo> {
    const started = performance.now()
    const mountpoint = resolve(req.mountpoint)
    this.#refuseMounted(req.image, mountpoint)
    const loc = locationOf(req)
    const loaded = preloaded ?? await this.#load(loc, req.image)
    const published = this.#publishedTrace(loc, loaded) // its GET overlaps the FUSE mount
    const m = await this.#mountLayers(loc, mountpoint, req.image, loaded, loaded.manifest.layers.map(l => l.digest), loaded.tocs, undefined, started)
    this.#rows.put({ mountpoint: m.info.mountpoint, image: req.image, manifest: m.image.digest, store: req.store, ...(req.s3Endpoint === undefined ? {} : { s3Endpoint: req.s3Endpoint }), mountedAt: m.info.mountedAt })
    void published.then(refs => {
      if (refs === undefined || refs.length === 0 || this.#mounts.get(m.info.mountpoint) !== m) return
      this.#log(`${m.info.mountpoint}: prefetching the ${refs.length} chunks of ${req.image}'s published access trace`)
      m.reader.prefetch(refs)
    })
    return m.info
  }

  /**
   * The published access trace of `loaded` (src/image/published-traces.ts),
   * or undefined when there is none or it cannot be read: it is only a hint,
   * so a failure is logged and the mount goes on. Async; never rejects.
   */
  async #publishedTrace (loc: StoreLocation, loaded: LoadedImage): Promise<ChunkRef[] | undefined> {
    try {
      return await getPublishedTrace(this.#stores.get(loc).store, loaded.digest, loaded.tocs)
    } catch (err) {
      this.#log(`published access trace of ${loaded.digest}: ${(err as Error).message}`)
      return undefined
    }
  }

  /**
   * Publish the node's access trace of the image `req.image` (what its
   * mounts here read first) to its store, for other nodes to prefetch at
   * mount. Async. Throws NotFoundError when this node has no trace of it (a
   * trace is saved when a mount of the image ends).
   */
  async publishTrace (req: StoreLocation & { image: string }): Promise<{ manifest: string, key: string, chunks: number }> {
    const loc = locationOf({ ...req, mountpoint: '' })
    const loaded = await this.#load(loc, req.image)
    const trace = this.#traces.load(loaded.digest)
    if (trace.length === 0) throw new NotFoundError(`cannot publish a trace of ${req.image}: no mount of it (manifest ${loaded.digest}) has ended on this node yet, so there is no access trace to publish`)
    const { key, chunks } = await putPublishedTrace(this.#stores.get(loc).store, loaded.digest, loaded.tocs, trace)
    return { manifest: loaded.digest, key, chunks }
  }

  #refuseMounted (image: string, mountpoint: string): void {
    if (this.#mounts.has(mountpoint)) throw new UsageError(`cannot mount ${image} at ${mountpoint}: already a layerd mount (of ${this.#mounts.get(mountpoint)!.info.image})`)
  }

  async #load (loc: StoreLocation, image: string): Promise<LoadedImage> {
    const { store } = this.#stores.get(loc)
    return await loadImage(store, image, { cache: this.#cache, pin: false, decodedToc: layer => this.#decodedToc(layer) })
  }

  /** A TOC some mount holds, or one built ahead for a takeover: neither read nor decoded again. Sync. */
  #decodedToc (layer: Digest): LayerToc | undefined {
    return this.#tocs.peek(layer) ?? this.#prepared.toc(layer)
  }

  /**
   * One FUSE mount of `tocs` (the layers `layers` of `loaded`), recorded in
   * #mounts at `mountpoint`; `top`: a stack's top, its tree split off the
   * layers `base` (and that tree built ahead, when it was), else the merge
   * of `tocs`. Async.
   */
  async #mountLayers (loc: StoreLocation, mountpoint: string, name: string, loaded: LoadedImage, layers: Digest[], tocs: LayerToc[],
    top: { tree: MergedTree, base: Digest[], prepared?: PreparedTree } | undefined, started: number): Promise<Mounted> {
    const { store, fetcher } = this.#stores.get(loc)
    const image: LoadedImage = { ...loaded, tocs: this.#tocs.acquire(layers, tocs) }
    const pins = [manifestKey(digestHex(image.digest)), ...layers.map(l => layerKey(digestHex(l)))]
    this.#cache.pin(pins)
    try {
      let neighbours: BlobNeighbours | undefined
      const reader = new MountChunkReader(fetcher, store.url, {
        onPrefetchError: err => this.#log(`prefetch for ${mountpoint}: ${(err as Error).message}`),
        neighbours: () => (neighbours ??= new BlobNeighbours(image.tocs)),
        isCached: digest => this.#cache.has(digest)
      })
      const prepared = top === undefined ? this.#prepared.take(mountpoint, layers) : top.prepared
      const source = { ...loc, layers, ...(top === undefined ? {} : { base: top.base }) }
      const mount = await mountImage({
        mountpoint, tocs: image.tocs, reader, log: this.#log, source, ...(top === undefined ? {} : { tree: top.tree }), ...(prepared === undefined ? {} : { prepared }),
        ...(this.#keeper === undefined ? {} : { keeper: this.#keeper }), ...fuseOptions(this.#options.fuseBackend)
      })
      const info: MountInfo = {
        mountpoint: mount.mountpoint, image: name, manifest: image.digest, store: store.url,
        mountedAt: new Date().toISOString(), mountMs: performance.now() - started
      }
      const m: Mounted = { info, mount, reader, image, layers, pins, loc }
      this.#mounts.set(mount.mountpoint, m)
      return m
    } catch (err) {
      this.#cache.unpin(pins)
      this.#tocs.release(layers)
      throw err
    }
  }

  /**
   * The TOC of `layer`, through the node's metadata cache (so a mount of it
   * soon after reads nothing again). Async; errors as loadImage().
   */
  async layerToc (loc: StoreLocation, layer: Digest): Promise<LayerToc> {
    const { store } = this.#stores.get(loc)
    return (await loadLayerTocs(store, [layer], { cache: this.#cache, pin: false, decodedToc: l => this.#decodedToc(l) }))[0]!
  }

  /**
   * The layer chain `layers` (bottom first) served read-only at
   * `req.mountpoint`, with no image manifest: what the containerd
   * snapshotter serves a remote snapshot from. Stacked where it can be
   * (image-stacks.ts, layer-split.ts): the mountpoint holds the top layer
   * alone, and the lower layers are the shared base every chain and stack on
   * them uses, so their page cache is read once per node; the caller puts
   * both, as `lowerDirs`, into its own overlay (no overlay of ours in
   * between). Otherwise one merged mount of the whole chain, `lowerDirs`
   * just the mountpoint. Not recorded for restore (the snapshotter mounts
   * its chains again itself; a kept connection is taken over); listed,
   * counted in stats and unmounted like any mount (the base is released with
   * it). Async; errors as mount().
   */
  async mountLayerChain (req: StoreLocation & { mountpoint: string, name: string, layers: Digest[] }): Promise<MountInfo & { lowerDirs: string[] }> {
    const started = performance.now()
    const mountpoint = resolve(req.mountpoint)
    this.#refuseMounted(req.name, mountpoint)
    const loc = locationOf({ ...req, image: req.name })
    const { store } = this.#stores.get(loc)
    const tocs = await loadLayerTocs(store, req.layers, { cache: this.#cache, pin: false, decodedToc: layer => this.#decodedToc(layer) })
    const chainDigest = sha256Digest(Buffer.from(req.layers.join('\n')))
    const loaded: LoadedImage = {
      digest: chainDigest,
      manifest: { mediaType: MANIFEST_MEDIA_TYPE, layers: tocs.map((t, i) => ({ digest: req.layers[i]!, diffId: t.diffId as Digest, size: 0, storedBytes: 0, entries: t.entries.length })), config: {} },
      tocs,
      fetchedBytes: 0
    }
    const stacked = await this.#mountChainStacked(loc, mountpoint, req.name, loaded, req.layers, started)
    if (stacked !== undefined) {
      this.#prefetchSmallTop(stacked)
      return { ...stacked.info, lowerDirs: this.layerChainLowerDirs(mountpoint)! }
    }
    const m = await this.#mountLayers(loc, mountpoint, req.name, loaded, req.layers, tocs, undefined, started)
    return { ...m.info, lowerDirs: [m.info.mountpoint] }
  }

  /**
   * The read-only directories a mountLayerChain() mount at `mountpoint`
   * shows, nearest first, for an overlay's lowerdir: its top layer and its
   * shared base, or the one merged mount; undefined when nothing is mounted
   * there. Sync.
   */
  layerChainLowerDirs (mountpoint: string): string[] | undefined {
    const m = this.#mounts.get(resolve(mountpoint))
    if (m === undefined) return undefined
    return m.chainBase === undefined ? [m.info.mountpoint] : [m.info.mountpoint, m.chainBase.mountpoint]
  }

  /**
   * A stacked chain's top layer, fetched whole behind demand reads when its
   * chunks are at most TOP_LAYER_PREFETCH_MAX_BYTES stored: a per-task layer
   * (a project tree) is small, and its task reads much of it in an order the
   * blob does not follow, so one GET per file missed would cost a round trip
   * each (the deploy corpus' webpack: hundreds of modules). Prefetch yields to
   * demand reads and merges adjacent chunks into one GET (chunk-fetcher.ts).
   * The shared base is never fetched whole. Sync; starts it and returns.
   */
  #prefetchSmallTop (m: Mounted): void {
    const refs = allChunks(m.image)
    const bytes = refs.reduce((n, r) => n + r.compressedLength, 0)
    if (this.#options.topLayerPrefetch === false || refs.length === 0 || bytes > TOP_LAYER_PREFETCH_MAX_BYTES) return
    m.reader.prefetch(refs)
  }

  /** mountLayerChain's stacked form: the top layer split off the shared base of the others; undefined (nothing mounted) when it cannot be. Async. */
  async #mountChainStacked (loc: StoreLocation, mountpoint: string, name: string, loaded: LoadedImage, layers: Digest[], started: number): Promise<Mounted | undefined> {
    if (layers.length < 2 || this.#options.stacks === false || !overlaySafePath(this.#sharedDir)) return undefined
    const { store, fetcher } = this.#stores.get(loc)
    const lower = layers.slice(0, -1)
    const base = await this.#stacks.acquireBase(lower, loaded.tocs.slice(0, -1), fetcher, store.url, loc)
    const preparedTop = this.#prepared.take(mountpoint, layers.slice(-1), lower)
    const split = preparedTop ?? splitTopLayer(base.tree, loaded.tocs.at(-1)!)
    if ('reason' in split) {
      this.#log(`${name}: one merged mount of its ${layers.length} layers, not stacked: ${split.reason}`)
      await this.#stacks.releaseBase(base.key)
      return undefined
    }
    try {
      const m = await this.#mountLayers(loc, mountpoint, name, loaded, layers.slice(-1), loaded.tocs.slice(-1),
        { tree: split.tree, base: lower, ...(preparedTop === undefined ? {} : { prepared: preparedTop }) }, started)
      m.chainBase = { key: base.key, mountpoint: base.mountpoint }
      return m
    } catch (err) {
      await this.#stacks.releaseBase(base.key)
      throw err
    }
  }

  /**
   * A shared image as a stack (image-stacks.ts): its lower layers' shared
   * base, its top layer, and the read-only overlay of the two at
   * `req.mountpoint`; one merged mount when the top layer cannot be
   * stacked exactly or the path cannot go into overlay options. Async.
   */
  #recordOf (req: MountRequest, mountpoint: string): { mountpoint: string, image: string, manifest: string, store: string, s3Endpoint?: string } {
    return { mountpoint, image: req.image, manifest: req.image, store: req.store, ...(req.s3Endpoint === undefined ? {} : { s3Endpoint: req.s3Endpoint }) }
  }

  async #mountShared (req: MountRequest): Promise<MountInfo> {
    const started = performance.now()
    const mountpoint = resolve(req.mountpoint)
    const loc = locationOf(req)
    const loaded = await this.#load(loc, req.image)
    const layers = loaded.manifest.layers.map(l => l.digest)
    const topPath = `${mountpoint}.top`
    if (layers.length < 2 || this.#options.stacks === false || !overlaySafePath(topPath) || !overlaySafePath(this.#sharedDir)) return await this.mount(req, loaded)
    const { store, fetcher } = this.#stores.get(loc)
    const base = await this.#stacks.acquireBase(layers.slice(0, -1), loaded.tocs.slice(0, -1), fetcher, store.url, loc)
    const preparedTop = this.#prepared.take(topPath, layers.slice(-1), layers.slice(0, -1))
    const split = preparedTop ?? splitTopLayer(base.tree, loaded.tocs.at(-1)!)
    if ('reason' in split) {
      this.#log(`image ${req.image}: one merged mount, not a stack: ${split.reason}`)
      await this.#stacks.releaseBase(base.key)
      return await this.mount(req, loaded)
    }
    let top: Mounted | undefined
    try {
      top = await this.#mountLayers(loc, topPath, req.image, loaded, layers.slice(-1), loaded.tocs.slice(-1),
        { tree: split.tree, base: layers.slice(0, -1), ...(preparedTop === undefined ? {} : { prepared: preparedTop }) }, started)
      // A takeover of both FUSE mounts keeps the overlay above them (and the sandboxes' overlays above that) as it is.
      const overlay = await mountedFsType(mountpoint)
      if (!(overlay === 'overlay' && top.mount.adopted && base.mount.adopted)) {
        if (overlay !== undefined) await unmountStackOverlay(mountpoint)
        await mountStackOverlay(mountpoint, topPath, base.mountpoint)
      }
    } catch (err) {
      if (top !== undefined) await this.unmount(topPath).catch(() => {})
      await this.#stacks.releaseBase(base.key)
      throw err
    }
    this.#mounts.delete(topPath)
    const info: MountInfo = { ...top.info, mountpoint, mountMs: performance.now() - started }
    this.#mounts.set(mountpoint, { ...top, info, stack: { topPath, baseKey: base.key } })
    this.#sharedRecords.put({ ...this.#recordOf(req, mountpoint), topPath: top.mount.mountpoint, basePath: base.mount.mountpoint })
    return info
  }

  /**
   * The image mounted read-only for sandboxes, at `<sharedDir>/<manifest hex>`,
   * mounting it on first use. Shared by every sandbox of that manifest and
   * kept until the daemon stops (a warm mount is what makes a start fast).
   * Concurrent calls for one image mount it once. Async.
   */
  async shared (req: StoreLocation & { image: string }): Promise<SharedImage> {
    const { store } = this.#stores.get(req)
    // Only the manifest digest is needed to find the mount: no TOC is read or decoded for a mounted image.
    const manifest = isDigest(req.image) ? req.image : await resolveRef(store, parseRef(req.image))
    const mountpoint = join(this.#sharedDir, digestHex(manifest))
    const existing = this.#mounts.get(mountpoint)
    if (existing !== undefined) return { mountpoint, manifest, config: existing.image.manifest.config, mountMs: 0 }
    let pending = this.#sharing.get(mountpoint)
    if (pending === undefined) {
      pending = this.#mountShared({ ...req, image: manifest, mountpoint })
        .then(info => {
          const m = this.#mounts.get(mountpoint)!
          m.info.image = req.image
          const record = this.#sharedRecords.get(mountpoint)
          this.#sharedRecords.put({ ...(record ?? this.#recordOf({ ...req, image: manifest, mountpoint }, mountpoint)), image: req.image })
          return { mountpoint, manifest, config: m.image.manifest.config, mountMs: info.mountMs }
        })
        .finally(() => this.#sharing.delete(mountpoint))
      this.#sharing.set(mountpoint, pending)
    }
    return await pending
  }

  /** The manifests of every image mounted now (plain mounts, stacks and shared images). Sync. */
  liveManifests (): Set<string> {
    return new Set([...this.#mounts.values()].map(m => m.image.digest))
  }

  /** Where shared images and stacks are mounted (`<home>/images`). */
  get sharedDir (): string { return this.#sharedDir }

  /** Unmount. Async. Throws NotFoundError when `mountpoint` is not a layerd mount. */
  async unmount (mountpoint: string): Promise<void> {
    const m = this.#get(mountpoint)
    if (m.stack !== undefined) await unmountStackOverlay(m.info.mountpoint)
    await m.mount.unmount()
    if (m.stack !== undefined) await this.#stacks.releaseBase(m.stack.baseKey)
    if (m.chainBase !== undefined) await this.#stacks.releaseBase(m.chainBase.key)
    this.#traces.save(m.image.digest, m.reader.trace.refs)
    this.#mounts.delete(m.info.mountpoint)
    this.#cache.unpin(m.pins)
    this.#tocs.release(m.layers)
    this.#rows.remove(m.info.mountpoint)
    this.#sharedRecords.delete(m.info.mountpoint)
  }

  list (): MountInfo[] {
    return [...this.#mounts.values()].map(m => m.info)
  }

  stats (mountpoint: string): MountStats {
    const m = this.#get(mountpoint)
    const s = m.reader.stats
    return {
      mountpoint: m.info.mountpoint,
      image: m.info.image,
      ...m.mount.stats(),
      fetches: s.fetches,
      prefetchedChunks: s.prefetchedChunks,
      storeErrors: s.storeErrors
    }
  }

  /**
   * Warm the cache with every chunk of the mounted image, behind demand
   * reads: the chunks an earlier mount of this image read first (its access
   * trace), in that order, then the rest. Starts it and returns at once.
   */
  prefetch (mountpoint: string): { chunks: number, traced: number, done: Promise<PrefetchResult> } {
    const m = this.#get(mountpoint)
    const trace = this.#traces.load(m.image.digest)
    const refs = prefetchOrder(trace, allChunks(m.image))
    const { fetcher } = this.#stores.get(m.loc)
    const done = fetcher.prefetch(refs, { stats: m.reader.stats })
    done.catch(err => this.#log(`prefetch ${m.info.mountpoint}: ${(err as Error).message}`))
    return { chunks: refs.length, traced: trace.length, done }
  }

  /**
   * After a restart: the mounts the database lists and the shared images
   * recorded belong to a daemon that died. Where the keeper kept a
   * connection, serve it again (a takeover: readers never notice); clean
   * every other mountpoint (a dead FUSE mount answers ENOTCONN) and, with
   * `restore`, mount it again. Shared images whose connections were not
   * kept are cleaned and mounted again on demand, as before. Never throws;
   * failures are logged.
   */
  async recover (restore: boolean): Promise<{ cleaned: number, restored: number, adopted: number }> {
    const keeper = restore ? this.#keeper : undefined
    let adopted = 0
    const sharedDir = await realpath(this.#sharedDir).catch(() => resolve(this.#sharedDir))
    const kept = (path: string): boolean => keeper?.has(path) === true
    const keptImages = this.#sharedRecords.list().filter(r => kept(r.topPath ?? r.mountpoint) && (r.basePath === undefined || kept(r.basePath)))
    const keepOverlays = new Set(keptImages.filter(r => r.topPath !== undefined).map(r => join(sharedDir, basename(r.mountpoint))))
    // Whatever is left below the shared directory that no kept connection serves is dead: detach it first.
    for (const left of await mountsUnder(this.#sharedDir)) {
      if (kept(left) || keepOverlays.has(left)) continue
      try { await lazyUnmount(left) } catch (err) { this.#log(`cleaning stale mount ${left}: ${(err as Error).message}`) }
    }
    for (const r of this.#sharedRecords.list()) {
      if (!keptImages.includes(r)) { this.#sharedRecords.delete(r.mountpoint); continue }
      try {
        const before = performance.now()
        await this.shared({ image: r.manifest, store: r.store, ...(r.s3Endpoint === undefined ? {} : { s3Endpoint: r.s3Endpoint }) })
        const m = this.#mounts.get(r.mountpoint)
        if (m !== undefined) { m.info.image = r.image; this.#sharedRecords.put({ ...this.#sharedRecords.get(r.mountpoint)!, image: r.image }) }
        if (m?.mount.adopted === true) adopted++
        this.#log(`image ${r.image} at ${r.mountpoint}: ${m?.mount.adopted === true ? 'taken over' : 'mounted again'} in ${Math.round(performance.now() - before)} ms`)
      } catch (err) {
        this.#log(`serving image ${r.image} at ${r.mountpoint} again: ${(err as Error).message}`)
      }
    }
    const rows = this.#rows.list()
    let restored = 0
    let cleaned = 0
    for (const row of rows) {
      if (this.#mounts.has(row.mountpoint)) continue // a shared image, served above
      cleaned++
      this.#rows.remove(row.mountpoint)
      if (!restore) {
        try { await lazyUnmount(row.mountpoint) } catch (err) { this.#log(`cleaning stale mount ${row.mountpoint}: ${(err as Error).message}`) }
        continue
      }
      try {
        // mountImage takes a kept connection over, or cleans the dead mount and mounts afresh.
        await this.mount({ image: row.manifest, mountpoint: row.mountpoint, store: row.store, ...(row.s3Endpoint === undefined ? {} : { s3Endpoint: row.s3Endpoint }) })
        const m = this.#mounts.get(resolve(row.mountpoint))!
        m.info.image = row.image
        if (m.mount.adopted) adopted++
        restored++
      } catch (err) {
        this.#log(`restoring mount of ${row.image} at ${row.mountpoint}: ${(err as Error).message}`)
      }
    }
    return { cleaned, restored, adopted }
  }

  /**
   * Whether a kept FUSE connection (an earlier daemon's, not yet taken over)
   * serves `mountpoint`: a mount there is alive and must not be detached, but
   * mounted through this manager again to be taken over. Async.
   */
  async hasKeptConnection (mountpoint: string): Promise<boolean> {
    if (this.#keeper === undefined) return false
    return this.#keeper.has(await canonicalPath(resolve(mountpoint)))
  }

  /**
   * After recover() and the services' own recovery (the containerd
   * snapshotter's lazy mounts): end the kept connections of mounts nobody
   * asked back (or all, with --no-restore), and clean their mountpoints. Async.
   */
  async releaseUntakenConnections (): Promise<void> {
    this.#prepared.clear()
    for (const dead of this.#keeper?.releaseUntaken() ?? []) {
      if (this.#mounts.has(dead)) continue
      try { await lazyUnmount(dead) } catch (err) { this.#log(`cleaning stale mount ${dead}: ${(err as Error).message}`) }
    }
  }

  /** Unmount everything (daemon shutdown). Keeps the database rows? No: a clean stop forgets them. */
  async unmountAll (): Promise<void> {
    for (const mountpoint of [...this.#mounts.keys()]) {
      try { await this.unmount(mountpoint) } catch (err) { this.#log(`unmounting ${mountpoint}: ${(err as Error).message}`) }
    }
  }

  #get (mountpoint: string): Mounted {
    const m = this.#mounts.get(resolve(mountpoint))
    if (m === undefined) throw new NotFoundError(`${resolve(mountpoint)} is not a layerd mount`)
    return m
  }
}

/** The store part of a request. */
function locationOf (req: MountRequest): StoreLocation {
  return { store: req.store, ...(req.s3Endpoint === undefined ? {} : { s3Endpoint: req.s3Endpoint }) }
}

/** Every distinct chunk an image references, in blob order (so prefetch GETs merge). */
export function allChunks (image: LoadedImage): ChunkRef[] {
  const seen = new Set<string>()
  const refs: ChunkRef[] = []
  for (const toc of image.tocs) {
    for (let i = 0; i < toc.chunks.length; i++) {
      const ref = resolveChunk(toc, i)
      if (seen.has(ref.digest)) continue
      seen.add(ref.digest)
      refs.push(ref)
    }
  }
  return refs.sort((a, b) => (a.blob === b.blob ? a.offset - b.offset : a.blob < b.blob ? -1 : 1))
}
