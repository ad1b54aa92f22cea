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
 * Its parts: shared-image-mounts.ts (images for sandboxes, stacks where they
 * can be), layer-chains.ts (containerd's layer chains), mount-recovery.ts
 * (after a restart), trace-sharing.ts (published access traces),
 * mount-stats.ts (counters); this class owns the mounts, their pins and
 * TOCs, and the node database's rows.
 *
 * May import: src/errors.ts, src/format/, src/image/, src/cache/, src/fs/, src/state/,
 * src/holder/ (types), this folder.
 */
import { resolve } from 'node:path'
import { NotFoundError, UsageError } from '../../errors.js'
import type { Digest } from '../../format/digest.js'
import type { LayerToc } from '../../format/toc.js'
import type { ChunkCache } from '../../cache/chunk-cache.js'
import type { PrefetchResult } from '../../cache/chunk-fetcher.js'
import { canonicalPath } from '../../fs/image-mount.js'
import type { FuseBackend } from '../../fs/fuse-binding.js'
import { loadImage, loadLayerTocs, type LoadedImage } from '../../image/load-image.js'
import type { NodeDb } from '../../state/node-db.js'
import { MountTable } from '../../state/mount-table.js'
import type { HeldConnections } from '../../holder/connection-keeper.js'
import { AccessTraces, prefetchOrder } from '../traces/access-traces.js'
import { SharedTocs } from '../reading/shared-tocs.js'
import { ImageStacks, unmountStackOverlay } from './image-stacks.js'
import { storeLocationOf, type StoreLocation, type StorePool } from '../reading/store-pool.js'
import { SharedImageRecords } from './shared-image-records.js'
import { SharedImageMounts } from './shared-image-mounts.js'
import { cleanStaleMount, recoverMounts, type RecoveryResult } from './mount-recovery.js'
import { PreparedTakeovers } from './prepared-takeovers.js'
import type { MountInfo, MountStats, SharedImage } from '../client/control-protocol.js'
import { allChunks } from '../reading/image-chunks.js'
import { mountStatsOf } from './mount-stats.js'
import { publishNodeTrace, readPublishedTrace, type PublishedTrace } from '../traces/trace-sharing.js'
import { LayerChains, chainLowerDirs, type ChainRequest, type StackTop } from './layer-chains.js'
import { mountLayers, type Mounted } from './layer-mount.js'
import type { LogLine } from '../../log-line.js'

/** How images are mounted (settings resolved at the root: LAYERD_STACKS, LAYERD_TOP_PREFETCH, LAYERD_FUSE_BACKEND). */
export interface MountOptions {
  /** Images for sandboxes, and containerd layer chains, as stacks where they can be. Default true. */
  stacks?: boolean
  /** A stacked layer chain's small top layer fetched whole at mount (layer-chains.ts). Default true. */
  topLayerPrefetch?: boolean
  /** Who serves the FUSE mounts; default: the kernel backend when it can. */
  fuseBackend?: FuseBackend
}

export interface MountRequest extends StoreLocation { image: string, mountpoint: string }

export class MountManager {
  readonly #rows: MountTable
  readonly #cache: ChunkCache
  readonly #stores: StorePool
  readonly #log: LogLine
  readonly #mounts = new Map<string, Mounted>()
  readonly #sharedDir: string
  readonly #traces: AccessTraces
  readonly #tocs = new SharedTocs()
  readonly #stacks: ImageStacks
  readonly #keeper: HeldConnections | undefined
  readonly #sharedRecords: SharedImageRecords
  readonly #chains: LayerChains
  readonly #shared: SharedImageMounts<Mounted>

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
  constructor (db: NodeDb, cache: ChunkCache, stores: StorePool, log: LogLine, sharedDir: string,
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
    this.#chains = new LayerChains({
      stores,
      stacks: this.#stacks,
      prepared: () => this.#prepared,
      layerTocs: async (loc, layers) => await loadLayerTocs(this.#stores.get(loc).store, layers, { cache: this.#cache, pin: false, decodedToc: l => this.#decodedToc(l) }),
      refuseMounted: (name, mountpoint) => this.#refuseMounted(name, mountpoint),
      mountLayers: async (...args) => await this.#mountLayers(...args),
      log
    }, { sharedDir, ...(options.stacks === undefined ? {} : { stacks: options.stacks }), ...(options.topLayerPrefetch === undefined ? {} : { topLayerPrefetch: options.topLayerPrefetch }) })
    this.#shared = new SharedImageMounts({
      stores,
      stacks: this.#stacks,
      records: this.#sharedRecords,
      prepared: () => this.#prepared,
      stackImages: options.stacks !== false,
      load: async (loc, image) => await this.#load(loc, image),
      mounted: mountpoint => this.#mounts.get(mountpoint),
      mountMerged: async (req, loaded) => await this.mount(req, loaded),
      mountLayers: async (...args) => await this.#mountLayers(...args),
      recordStack: (top, topPath, mountpoint, info, baseKey) => {
        this.#mounts.delete(topPath)
        this.#mounts.set(mountpoint, { ...top, info, stack: { topPath, baseKey } })
      },
      unmount: async mountpoint => await this.unmount(mountpoint),
      log
    }, sharedDir)
  }

  /** Mount an image. Async. Throws NotFoundError for an unknown image, UsageError when the directory is already a layerd mount. */
  async mount (req: MountRequest, preloaded?: LoadedImage): Promise<MountInfo> {
    const started = performance.now()
    const mountpoint = resolve(req.mountpoint)
    this.#refuseMounted(req.image, mountpoint)
    const loc = storeLocationOf(req)
    const loaded = preloaded ?? await this.#load(loc, req.image)
    const published = readPublishedTrace(this.#stores.get(loc).store, loaded, this.#log) // its GET overlaps the FUSE mount
    const m = await this.#mountLayers(loc, mountpoint, req.image, loaded, loaded.manifest.layers.map(l => l.digest), loaded.tocs, undefined, started)
    this.#rows.put({ mountpoint: m.info.mountpoint, image: req.image, manifest: m.image.digest, ...storeLocationOf(req), mountedAt: m.info.mountedAt })
    void published.then(refs => {
      if (refs === undefined || refs.length === 0 || this.#mounts.get(m.info.mountpoint) !== m) return
      this.#log(`${m.info.mountpoint}: prefetching the ${refs.length} chunks of ${req.image}'s published access trace`)
      m.reader.prefetch(refs)
    })
    return m.info
  }

  /**
   * Publish the node's access trace of the image `req.image` (what its
   * mounts here read first) to its store, for other nodes to prefetch at
   * mount. Async. Throws NotFoundError when this node has no trace of it (a
   * trace is saved when a mount of the image ends).
   */
  async publishTrace (req: StoreLocation & { image: string }): Promise<PublishedTrace> {
    const loc = storeLocationOf(req)
    const loaded = await this.#load(loc, req.image)
    return await publishNodeTrace(this.#stores.get(loc).store, this.#traces, req.image, loaded)
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
    top: StackTop | undefined, started: number): Promise<Mounted> {
    const parts = { stores: this.#stores, cache: this.#cache, tocs: this.#tocs, prepared: this.#prepared, keeper: this.#keeper, fuseBackend: this.#options.fuseBackend, log: this.#log }
    const m = await mountLayers(parts, { loc, mountpoint, name, loaded, layers, tocs, top, started })
    this.#mounts.set(m.mount.mountpoint, m)
    return m
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
   * The layer chain `req.layers` (bottom first) served read-only at
   * `req.mountpoint`, with no image manifest, and the directories it shows
   * for an overlay's lowerdir (layer-chains.ts). Not recorded for restore
   * (the snapshotter mounts its chains again itself; a kept connection is
   * taken over); listed, counted in stats and unmounted like any mount (the
   * base is released with it). Async; errors as mount().
   */
  async mountLayerChain (req: ChainRequest): Promise<MountInfo & { lowerDirs: string[] }> {
    return await this.#chains.mount(req)
  }

  /**
   * The read-only directories a mountLayerChain() mount at `mountpoint`
   * shows, nearest first, for an overlay's lowerdir; undefined when nothing
   * is mounted there. Sync.
   */
  layerChainLowerDirs (mountpoint: string): string[] | undefined {
    const m = this.#mounts.get(resolve(mountpoint))
    return m === undefined ? undefined : chainLowerDirs(m)
  }

  /**
   * The image mounted read-only for sandboxes, at `<sharedDir>/<manifest hex>`,
   * mounting it on first use (shared-image-mounts.ts: a stack where it can
   * be). Shared by every sandbox of that manifest and kept until the daemon
   * stops. Concurrent calls for one image mount it once. Async.
   */
  async shared (req: StoreLocation & { image: string }): Promise<SharedImage> {
    return await this.#shared.shared(req)
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

  /**
   * A mount's counters: a mount of this manager's, or a shared base under
   * the shared directory (image-stacks.ts; not listed by list(), as it is
   * no image of its own). Sync. Throws NotFoundError for anything else.
   */
  stats (mountpoint: string): MountStats {
    const shared = this.#mounts.has(resolve(mountpoint)) ? undefined : this.#stacks.mountedBase(resolve(mountpoint))
    const m = shared === undefined
      ? this.#get(mountpoint)
      : { info: { mountpoint: shared.base.mountpoint, image: `shared base of ${shared.layers} layer(s), under ${shared.users} stack(s)` }, reader: shared.base.reader, mount: shared.base.mount }
    return mountStatsOf(m)
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
    done.catch(err => this.#log(`prefetch ${m.info.mountpoint}: ${(err as Error).message}`, 'warn'))
    return { chunks: refs.length, traced: trace.length, done }
  }

  /**
   * After a restart: take over the kept connections of the mounts and shared
   * images a dead daemon left, clean the other mountpoints and, with
   * `restore`, mount them again (mount-recovery.ts). Async; never throws,
   * failures are logged.
   */
  async recover (restore: boolean): Promise<RecoveryResult> {
    return await recoverMounts({
      keeper: this.#keeper,
      sharedDir: this.#sharedDir,
      sharedRecords: this.#sharedRecords,
      rows: this.#rows,
      mounted: mountpoint => this.#mounts.get(mountpoint),
      shared: async req => await this.shared(req),
      mount: async req => await this.mount(req),
      log: this.#log
    }, restore)
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
      await cleanStaleMount({ log: this.#log }, dead)
    }
  }

  /** Unmount everything (daemon shutdown). Keeps the database rows? No: a clean stop forgets them. */
  async unmountAll (): Promise<void> {
    for (const mountpoint of [...this.#mounts.keys()]) {
      try { await this.unmount(mountpoint) } catch (err) { this.#log(`unmounting ${mountpoint}: ${(err as Error).message}`, 'warn') }
    }
  }

  #get (mountpoint: string): Mounted {
    const m = this.#mounts.get(resolve(mountpoint))
    if (m === undefined) throw new NotFoundError(`${resolve(mountpoint)} is not a layerd mount`)
    return m
  }
}

