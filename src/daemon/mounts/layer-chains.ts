/**
 * Layer chains: a chain of layers (bottom first) served read-only with no
 * image manifest, which is what the containerd snapshotter serves a remote
 * snapshot from (src/snapshotter/daemon-remote-layers.ts).
 *
 * Stacked where it can be (image-stacks.ts, src/format/layer-split.ts): the
 * chain's mountpoint holds its top layer alone, and the lower layers are the
 * shared base that every chain and sandbox image on them uses, so their page
 * cache is read once per node. The caller puts both, as `lowerDirs`, into
 * its own overlay (there is no overlay of ours in between). Otherwise one
 * merged mount of the whole chain, whose `lowerDirs` is just the mountpoint.
 * A stacked chain's small top layer is fetched whole at mount.
 *
 * The mounts themselves are MountManager's (ChainMountHost): listed, counted
 * in stats and unmounted like any mount, the base released with its chain.
 *
 * May import: src/errors.ts, src/format/, src/image/ (types), src/cache/ (types), this folder.
 */
import { resolve } from 'node:path'
import { sha256Digest, type Digest } from '../../format/digest.js'
import { MANIFEST_MEDIA_TYPE } from '../../format/manifest.js'
import { splitTopLayer } from '../../format/layer-split.js'
import type { MergedTree } from '../../format/merge.js'
import type { LayerToc } from '../../format/toc.js'
import type { LoadedImage } from '../../image/load-image.js'
import type { PreparedTree } from '../../fs/image-mount.js'
import type { MountInfo } from '../client/control-protocol.js'
import type { ImageStacks } from './image-stacks.js'
import { overlaySafePath } from './image-stacks.js'
import { allChunks } from '../reading/image-chunks.js'
import type { MountChunkReader } from '../reading/mount-chunk-reader.js'
import type { PreparedTakeovers } from './prepared-takeovers.js'
import { storeLocationOf, type StoreLocation, type StorePool } from '../reading/store-pool.js'
import type { LogLine } from '../../log-line.js'

/** A stacked layer chain's top layer is fetched whole at mount up to this many stored (compressed) bytes (prefetchSmallTop). */
export const TOP_LAYER_PREFETCH_MAX_BYTES = 16 * 1024 * 1024

/** What a chain needs of one of the host's mounts. */
export interface ChainMount {
  info: MountInfo
  reader: MountChunkReader
  image: LoadedImage
  /** Set on a chain served stacked: the mount is its top layer alone, over this shared base. */
  chainBase?: { key: string, mountpoint: string }
}

/** A stack's top: its tree split off the layers `base` (built ahead for a takeover, when it was). */
export interface StackTop { tree: MergedTree, base: Digest[], prepared?: PreparedTree }

/** What the chains use of MountManager. */
export interface ChainMountHost {
  stores: Pick<StorePool, 'get'>
  stacks: Pick<ImageStacks, 'acquireBase' | 'releaseBase'>
  /** The trees built ahead for a takeover (none outside one). */
  prepared: () => PreparedTakeovers
  /** The decoded TOCs of `layers`, through the node's metadata cache. Async. */
  layerTocs: (loc: StoreLocation, layers: Digest[]) => Promise<LayerToc[]>
  /** Throws UsageError when `mountpoint` is already a layerd mount. Sync. */
  refuseMounted: (name: string, mountpoint: string) => void
  /** One FUSE mount of `tocs` (the layers `layers` of `loaded`) at `mountpoint`, recorded as the host's mount; `top`: a stack's top. Async. */
  mountLayers: (loc: StoreLocation, mountpoint: string, name: string, loaded: LoadedImage, layers: Digest[], tocs: LayerToc[],
    top: StackTop | undefined, started: number) => Promise<ChainMount>
  log: LogLine
}

export interface ChainOptions {
  /** Chains stacked over a shared base where they can be (LAYERD_STACKS). Default true. */
  stacks?: boolean
  /** A stacked chain's small top layer fetched whole at mount (LAYERD_TOP_PREFETCH). Default true. */
  topLayerPrefetch?: boolean
  /** Where the shared bases are mounted (`<home>/images`). */
  sharedDir: string
}

export interface ChainRequest extends StoreLocation { mountpoint: string, name: string, layers: Digest[] }

export class LayerChains {
  constructor (private readonly host: ChainMountHost, private readonly options: ChainOptions) {}

  /**
   * The chain `req.layers` mounted at `req.mountpoint`, stacked where it can
   * be (see the module doc), and the read-only directories it shows
   * (lowerDirs). Async; errors as MountManager.mount().
   */
  async mount (req: ChainRequest): Promise<MountInfo & { lowerDirs: string[] }> {
    const started = performance.now()
    const mountpoint = resolve(req.mountpoint)
    this.host.refuseMounted(req.name, mountpoint)
    const loc = storeLocationOf(req)
    const tocs = await this.host.layerTocs(loc, req.layers)
    const loaded: LoadedImage = {
      digest: sha256Digest(Buffer.from(req.layers.join('\n'))),
      manifest: { mediaType: MANIFEST_MEDIA_TYPE, layers: tocs.map((t, i) => ({ digest: req.layers[i]!, diffId: t.diffId as Digest, size: 0, storedBytes: 0, entries: t.entries.length })), config: {} },
      tocs,
      fetchedBytes: 0
    }
    const stacked = await this.#mountStacked(loc, mountpoint, req.name, loaded, req.layers, started)
    if (stacked !== undefined) {
      this.#prefetchSmallTop(stacked)
      return { ...stacked.info, lowerDirs: chainLowerDirs(stacked) }
    }
    const m = await this.host.mountLayers(loc, mountpoint, req.name, loaded, req.layers, tocs, undefined, started)
    return { ...m.info, lowerDirs: chainLowerDirs(m) }
  }

  /** The stacked form: the top layer split off the shared base of the others; undefined (nothing mounted) when it cannot be. Async. */
  async #mountStacked (loc: StoreLocation, mountpoint: string, name: string, loaded: LoadedImage, layers: Digest[], started: number): Promise<ChainMount | undefined> {
    if (layers.length < 2 || this.options.stacks === false || !overlaySafePath(this.options.sharedDir)) return undefined
    const { store, fetcher } = this.host.stores.get(loc)
    const lower = layers.slice(0, -1)
    const base = await this.host.stacks.acquireBase(lower, loaded.tocs.slice(0, -1), fetcher, store.url, loc)
    const preparedTop = this.host.prepared().take(mountpoint, layers.slice(-1), lower)
    const split = preparedTop ?? splitTopLayer(base.tree, loaded.tocs.at(-1)!)
    if ('reason' in split) {
      this.host.log(`${name}: one merged mount of its ${layers.length} layers, not stacked: ${split.reason}`)
      await this.host.stacks.releaseBase(base.key)
      return undefined
    }
    try {
      const m = await this.host.mountLayers(loc, mountpoint, name, loaded, layers.slice(-1), loaded.tocs.slice(-1),
        { tree: split.tree, base: lower, ...(preparedTop === undefined ? {} : { prepared: preparedTop }) }, started)
      m.chainBase = { key: base.key, mountpoint: base.mountpoint }
      return m
    } catch (err) {
      await this.host.stacks.releaseBase(base.key)
      throw err
    }
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
  #prefetchSmallTop (m: ChainMount): void {
    const refs = allChunks(m.image)
    const bytes = refs.reduce((n, r) => n + r.compressedLength, 0)
    if (this.options.topLayerPrefetch === false || refs.length === 0 || bytes > TOP_LAYER_PREFETCH_MAX_BYTES) return
    m.reader.prefetch(refs)
  }
}

/** The read-only directories a chain's mount shows, nearest first, for an overlay's lowerdir: its top layer and its shared base, or the one merged mount. Sync. */
export function chainLowerDirs (m: ChainMount): string[] {
  return m.chainBase === undefined ? [m.info.mountpoint] : [m.info.mountpoint, m.chainBase.mountpoint]
}
