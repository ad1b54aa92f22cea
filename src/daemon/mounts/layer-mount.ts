/**
 * One FUSE mount of some layers of an image, as MountManager keeps it: the
 * image's metadata pinned in the cache, the layers' decoded TOCs held in
 * SharedTocs, a chunk reader of the image's store, and the mount itself
 * (taking over a kept connection, or a tree built ahead for one, when there
 * is one). A plain mount, a stack's top and a layer chain are each one.
 *
 * May import: src/format/, src/cache/ (types), src/fs/, src/image/ (types), src/holder/ (types), this folder.
 */
import { digestHex, type Digest } from '../../format/digest.js'
import { layerKey, manifestKey } from '../../format/keys.js'
import type { LayerToc } from '../../format/toc.js'
import type { ChunkCache } from '../../cache/chunk-cache.js'
import { fuseOptions, mountImage, type ImageMount } from '../../fs/image-mount.js'
import type { FuseBackend } from '../../fs/fuse-binding.js'
import type { HeldConnections } from '../../holder/connection-keeper.js'
import type { LoadedImage } from '../../image/load-image.js'
import { BlobNeighbours } from '../reading/blob-neighbours.js'
import type { MountInfo } from '../client/control-protocol.js'
import type { ChainMount, StackTop } from './layer-chains.js'
import { MountChunkReader } from '../reading/mount-chunk-reader.js'
import type { PreparedTakeovers } from './prepared-takeovers.js'
import type { SharedTocs } from '../reading/shared-tocs.js'
import type { StoreLocation, StorePool } from '../reading/store-pool.js'
import type { LogLine } from '../../log-line.js'

/** A mount MountManager keeps. */
export interface Mounted extends ChainMount {
  mount: ImageMount
  layers: Digest[]
  /** The cache keys pinned while it is mounted (the manifest's, the layers' TOCs). */
  pins: string[]
  loc: StoreLocation
  /** A shared image served as a stack: info.mountpoint is the overlay, `mount` its top layer. */
  stack?: { topPath: string, baseKey: string }
}

/** What a layer mount is made with. */
export interface LayerMountParts {
  stores: Pick<StorePool, 'get'>
  cache: Pick<ChunkCache, 'pin' | 'unpin' | 'has'>
  tocs: Pick<SharedTocs, 'acquire' | 'release'>
  /** The trees built ahead for a takeover (none outside one). */
  prepared: Pick<PreparedTakeovers, 'take'>
  keeper: HeldConnections | undefined
  fuseBackend: FuseBackend | undefined
  log: LogLine
}

/** What is mounted: `layers` of `loaded` (their decoded `tocs`), named `name`; `top`: a stack's top, split off its base. */
export interface LayerMountRequest {
  loc: StoreLocation
  mountpoint: string
  name: string
  loaded: LoadedImage
  layers: Digest[]
  tocs: LayerToc[]
  top: StackTop | undefined
  /** performance.now() when the caller's mount began (for mountMs). */
  started: number
}

/**
 * One FUSE mount of `req.tocs` at `req.mountpoint`: `req.top`'s tree when
 * it is a stack's top (and that tree built ahead, when it was), else the
 * merge of the TOCs. Async. On failure nothing stays pinned or held; errors
 * as mountImage().
 */
export async function mountLayers (parts: LayerMountParts, { loc, mountpoint, name, loaded, layers, tocs, top, started }: LayerMountRequest): Promise<Mounted> {
  const { store, fetcher } = parts.stores.get(loc)
  const image: LoadedImage = { ...loaded, tocs: parts.tocs.acquire(layers, tocs) }
  const pins = [manifestKey(digestHex(image.digest)), ...layers.map(l => layerKey(digestHex(l)))]
  parts.cache.pin(pins)
  try {
    let neighbours: BlobNeighbours | undefined
    const reader = new MountChunkReader(fetcher, store.url, {
      onPrefetchError: err => parts.log(`prefetch for ${mountpoint}: ${(err as Error).message}`, 'warn'),
      neighbours: () => (neighbours ??= new BlobNeighbours(image.tocs)),
      isCached: digest => parts.cache.has(digest)
    })
    const prepared = top === undefined ? parts.prepared.take(mountpoint, layers) : top.prepared
    const source = { ...loc, layers, ...(top === undefined ? {} : { base: top.base }) }
    const mount = await mountImage({
      mountpoint, tocs: image.tocs, reader, log: parts.log, source, ...(top === undefined ? {} : { tree: top.tree }), ...(prepared === undefined ? {} : { prepared }),
      ...(parts.keeper === undefined ? {} : { keeper: parts.keeper }), ...fuseOptions(parts.fuseBackend)
    })
    const info: MountInfo = {
      mountpoint: mount.mountpoint, image: name, manifest: image.digest, store: store.url,
      mountedAt: new Date().toISOString(), mountMs: performance.now() - started
    }
    return { info, mount, reader, image, layers, pins, loc }
  } catch (err) {
    parts.cache.unpin(pins)
    parts.tocs.release(layers)
    throw err
  }
}
