/**
 * Images mounted for sandboxes as stacks: one FUSE mount of the lower
 * layers merged (a "base", shared by every image on those layers), one
 * FUSE mount of the image's top layer, and a read-only overlayfs of the two
 * at the image's shared path. Why: the page cache belongs to a mount's
 * inodes, so with one merged mount per image every image re-read its
 * base (python, libc…) through FUSE; stacked, the base is read once per
 * node, as overlay2 shares a base layer. The base's metadata table and
 * merged tree are also built once. When the top layer cannot be stacked
 * exactly (src/format/layer-split.ts), the image gets one merged mount as
 * before.
 *
 * Layout below the shared directory: `base-<32 hex of the layer digests>`
 * (a base), `<manifest hex>.top` (a top layer), `<manifest hex>` (the
 * overlay: what sandboxes use). None is recorded in the node database: a
 * restarted daemon detaches whatever is left below the shared directory.
 *
 * May import: src/errors.ts, src/native.ts, src/format/, src/fs/, src/cache/ (types), this folder.
 */
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { UnsupportedError, describeError } from '../../errors.js'
import { digestHex, sha256Hex, type Digest } from '../../format/digest.js'
import { layerKey } from '../../format/keys.js'
import { mergeLayers, type MergedTree } from '../../format/merge.js'
import type { LayerToc } from '../../format/toc.js'
import type { ChunkCache } from '../../cache/chunk-cache.js'
import type { ChunkFetcher } from '../../cache/chunk-fetcher.js'
import { fuseOptions, mountImage, type ImageMount } from '../../fs/image-mount.js'
import type { FuseBackend } from '../../fs/fuse-binding.js'
import { MNT_DETACH, MS_NODEV, MS_NOSUID, MS_RDONLY, nativeMounts } from '../../native.js'
import { BlobNeighbours } from '../reading/blob-neighbours.js'
import { MountChunkReader } from '../reading/mount-chunk-reader.js'
import type { SharedTocs } from '../reading/shared-tocs.js'
import type { ConnectionKeeper } from '../../fs/kernel-fuse-keeper.js'
import type { PreparedTakeovers } from './prepared-takeovers.js'
import type { LogLine } from '../../log-line.js'

/** Overlay options for a read-only stack: nothing below may redirect lookups; no index, no xino (inode numbers of the FUSE layers are small). */
const STACK_OVERLAY_OPTIONS = 'redirect_dir=off,index=off,metacopy=off,xino=off'

export interface BaseMount {
  key: string
  mountpoint: string
  tree: MergedTree
  mount: ImageMount
  reader: MountChunkReader
}

interface BaseEntry { users: number, ready: Promise<BaseMount>, layers: Digest[], pins: string[], mounted?: BaseMount }

export class ImageStacks {
  readonly #bases = new Map<string, BaseEntry>()

  constructor (
    private readonly cache: ChunkCache,
    private readonly tocs: SharedTocs,
    private readonly sharedDir: string,
    private readonly log: LogLine,
    /** Keeps the bases' FUSE connections across daemon restarts, and hands over kept ones. */
    private readonly keeper?: ConnectionKeeper,
    /** Who serves the base mounts; default: the kernel backend when it can. */
    private readonly fuseBackend?: FuseBackend,
    /** Trees built ahead for a takeover (a planned restart). */
    private readonly prepared?: () => PreparedTakeovers
  ) {}

  /** The base of `layers` (decoded as `tocs`), mounted on first use; each call needs one release(). Async. */
  async acquireBase (layers: Digest[], tocs: readonly LayerToc[], fetcher: ChunkFetcher, storeName: string, loc: { store: string, s3Endpoint?: string }): Promise<BaseMount> {
    const key = sha256Hex(Buffer.from(layers.join('\n'))).slice(0, 32)
    let entry = this.#bases.get(key)
    if (entry === undefined) {
      const pins = layers.map(l => layerKey(digestHex(l)))
      this.cache.pin(pins)
      const shared = this.tocs.acquire(layers, tocs)
      const ready = this.#mountBase(key, layers, shared, fetcher, storeName, loc)
      const created: BaseEntry = { users: 0, ready, layers, pins }
      entry = created
      this.#bases.set(key, entry)
      ready.then(base => { created.mounted = base }, () => {})
      ready.catch(() => {
        this.#bases.delete(key)
        this.cache.unpin(pins)
        this.tocs.release(layers)
      })
    }
    entry.users++
    try {
      return await entry.ready
    } catch (err) {
      entry.users--
      throw err
    }
  }

  /** The base mounted at `mountpoint` (a resolved path) and how many stacks use it; undefined when none is (or not yet). Sync. */
  mountedBase (mountpoint: string): { base: BaseMount, layers: number, users: number } | undefined {
    for (const e of this.#bases.values()) {
      if (e.mounted?.mountpoint === mountpoint) return { base: e.mounted, layers: e.layers.length, users: e.users }
    }
    return undefined
  }

  /** Drop one use of base `key`; the last one unmounts it. Async; never throws (failures are logged). */
  async releaseBase (key: string): Promise<void> {
    const entry = this.#bases.get(key)
    if (entry === undefined || --entry.users > 0) return
    this.#bases.delete(key)
    try {
      const base = await entry.ready
      await base.mount.unmount()
    } catch (err) {
      this.log(`unmounting base ${key}: ${describeError(err)}`, 'warn')
    } finally {
      this.cache.unpin(entry.pins)
      this.tocs.release(entry.layers)
    }
  }

  async #mountBase (key: string, layers: Digest[], tocs: LayerToc[], fetcher: ChunkFetcher, storeName: string, loc: { store: string, s3Endpoint?: string }): Promise<BaseMount> {
    const mountpoint = join(this.sharedDir, `base-${key}`)
    let neighbours: BlobNeighbours | undefined
    const reader = new MountChunkReader(fetcher, storeName, {
      onPrefetchError: err => this.log(`prefetch for ${mountpoint}: ${(err as Error).message}`, 'warn'),
      neighbours: () => (neighbours ??= new BlobNeighbours(tocs)),
      isCached: digest => this.cache.has(digest)
    })
    const prepared = this.prepared?.().take(mountpoint, layers)
    const tree = prepared?.tree ?? mergeLayers(tocs)
    const source = { ...loc, layers }
    const mount = await mountImage({
      mountpoint, tocs, tree, reader, log: this.log, source, ...(prepared === undefined ? {} : { prepared }), ...(this.keeper === undefined ? {} : { keeper: this.keeper }), ...fuseOptions(this.fuseBackend)
    })
    return { key, mountpoint, tree, mount, reader }
  }
}

/** Whether `path` can go into overlay's lowerdir option unescaped. */
export function overlaySafePath (path: string): boolean {
  return !/[,:\\\s]/.test(path)
}

/** Mount the read-only overlay of `top` over `base` at `mountpoint` (both overlay-safe paths). Async; throws UnsupportedError with the reason. */
export async function mountStackOverlay (mountpoint: string, top: string, base: string): Promise<void> {
  const data = `${STACK_OVERLAY_OPTIONS},lowerdir=${top}:${base}`
  try {
    await mkdir(mountpoint, { recursive: true })
    // nosuid, nodev: as the FUSE mounts below; an image's setuid files and device nodes are inert on the host.
    nativeMounts().mount('layerd-stack', mountpoint, 'overlay', MS_RDONLY | MS_NOSUID | MS_NODEV, data)
  } catch (err) {
    throw new UnsupportedError(`cannot stack ${top} over ${base} at ${mountpoint}: ${describeError(err)}`, { cause: err })
  }
}

/** Detach the overlay at `mountpoint` (lazily: sandboxes on it keep working). Async; never throws for "not mounted". */
export async function unmountStackOverlay (mountpoint: string): Promise<void> {
  try { nativeMounts().umount2(mountpoint, MNT_DETACH) } catch {}
}
