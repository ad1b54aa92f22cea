/**
 * mountImage: an image (its layer TOCs, lowest first) mounted read-only at a
 * directory, with content read through a ChunkReader. Composes the merge,
 * the view, the file reader, the errno boundary and the binding; owns the
 * mount's lifecycle (stale mountpoints, idempotent lazy unmount) and its
 * counters.
 *
 * May import: src/errors.ts, src/format/, ./*.
 */
import { mkdir, realpath, statfs } from 'node:fs/promises'
import { basename, dirname, join, resolve } from 'node:path'
import { UsageError, describeError } from '../errors.js'
import { mergeLayers, type MergedInode, type MergedTree } from '../format/merge.js'
import type { LayerToc } from '../format/toc.js'
import { ErrnoBoundary } from './errno-boundary.js'
import { FileReader, type ChunkReader } from './file-reader.js'
import { lazyUnmount, mountFuse, mountedFsType, type FuseBackend, type FuseMount, type FuseMountOptions } from './fuse-binding.js'
import { createFuseOps } from './fuse-ops.js'
import { ImageView } from './image-view.js'
import { adoptKernelFuse, kernelFuseUnavailable, mountKernelFuse, type KernelFuseCounters, type KernelFuseMount, type PassthroughBackings } from './kernel-fuse.js'
import type { ConnectionKeeper, TreeSource } from './kernel-fuse-keeper.js'
import type { KernelFuseTable } from './kernel-fuse-table.js'
import type { LogLine } from '../log-line.js'
import { PassthroughFiles, type BackingIdRecord, type HotFiles } from './passthrough-files.js'

/**
 * A mount's tree, view and metadata table built ahead (a planned restart
 * builds them while the old daemon still serves), so a takeover only attaches.
 * `digest` is the table's sha256 hex.
 */
export interface PreparedTree { tree: MergedTree, view: ImageView, table: KernelFuseTable, digest: string }

/** Kernel cache lifetimes for immutable images: a day. */
export const IMMUTABLE_TIMEOUT_S = 86_400
/** Largest read request: the kernel backend asks for 1 MiB (256 pages); fuse-native caps it at libfuse 2's 128 KiB. */
export const MAX_READ_1MIB = 1024 * 1024
/** Kernel readahead for a mount (the default is 128 KiB): fewer, larger, parallel reads on sequential access. */
export const READ_AHEAD_1MIB_IN_KIB = 1024

export const DEFAULT_FUSE_OPTIONS: FuseMountOptions = {
  fsName: 'layerd',
  readOnly: true,
  allowOther: true,
  defaultPermissions: true,
  kernelCache: true,
  entryTimeoutS: IMMUTABLE_TIMEOUT_S,
  attrTimeoutS: IMMUTABLE_TIMEOUT_S,
  negativeTimeoutS: IMMUTABLE_TIMEOUT_S,
  maxReadBytes: MAX_READ_1MIB,
  readAheadKiB: READ_AHEAD_1MIB_IN_KIB
}

export interface MountImageOptions {
  /** A directory; created when missing. A dead FUSE mount left there is cleaned first. */
  mountpoint: string
  /** Layer TOCs, lowest first. */
  tocs: readonly LayerToc[]
  reader: ChunkReader
  /** One line per event worth a human's attention (never per op). */
  log: LogLine
  /** Overrides of {@link DEFAULT_FUSE_OPTIONS}. */
  fuse?: Partial<FuseMountOptions>
  /** The tree to serve, when the caller has it: `mergeLayers(tocs)`, or a split-off top layer (src/format/layer-split.ts). Default: merged here. */
  tree?: MergedTree
  /** Keeps kernel-backend connections across daemon restarts, and hands over the ones an earlier daemon kept. */
  keeper?: ConnectionKeeper
  /** What the tree is built from, recorded with a kept connection (TreeSource). */
  source?: TreeSource
  /** The tree, view and table built ahead for this mount: used when `tree` is absent or is `prepared.tree`. */
  prepared?: PreparedTree
  /**
   * FUSE passthrough (kernel backend): local copies of whole files that the
   * kernel reads itself (src/fs/passthrough-files.ts), and where each mount's
   * backing ids are saved for a takeover. Turns `fuse.passthrough` on unless it is set.
   */
  hotFiles?: { store: HotFiles, ids?: (mountpoint: string) => BackingIdRecord }
}

export interface ImageMountStats {
  /** Bytes read from the store for this mount. */
  fetchedBytes: number
  /** Compressed bytes of every chunk the image's TOCs reference (each once). */
  storedBytes: number
  /** Plain bytes of the image's files (each inode once). */
  imageBytes: number
  inodes: number
  chunkHits: number
  chunkMisses: number
  /** Read ops answered without awaiting, and those that fetched. */
  syncReads: number
  fetchReads: number
  /** Chunks refused as corrupt, and ops answered EIO. */
  corruptChunks: number
  ioErrors: number
  /** Entries of the TOCs that could not apply (skipped). */
  mergeConflicts: number
}

export interface ImageMount {
  /** Absolute path of the mount. */
  readonly mountpoint: string
  readonly view: ImageView
  /** Who serves it (see FuseMountOptions.backend). */
  readonly backend: FuseBackend
  /** Served from a FUSE connection an earlier daemon kept (a takeover), not mounted by this one. */
  readonly adopted: boolean
  /** The kernel backend's request counters; undefined with fuse-native. Sync. */
  serverCounters: () => KernelFuseCounters | undefined
  /** Where the connection has FUSE passthrough: its backing files, and its inodes by node id. */
  readonly passthrough?: { backings: PassthroughBackings, nodes: ReadonlyArray<MergedInode | undefined> }
  /** Counters since mount. Sync. */
  stats: () => ImageMountStats
  /**
   * Detach the mount. Lazy: files still open keep reading until closed, so
   * a busy mount never blocks this. Idempotent; concurrent calls share one
   * attempt. Throws UnsupportedError when no unmount tool works.
   */
  unmount: () => Promise<void>
}

/**
 * Mount the merged image. Async; resolves once the mount answers. Rejects
 * with UsageError (mountpoint not a directory, already a live mount),
 * UnsupportedError (no FUSE binding or unmount tool).
 */
export async function mountImage (options: MountImageOptions): Promise<ImageMount> {
  const { tocs, reader, log, keeper } = options
  const kept = keeper?.take(await canonicalPath(resolve(options.mountpoint)))
  // A kept connection is still mounted there and answers nothing until served: no statfs on it before.
  const mountpoint = kept?.record.mountpoint ?? await prepareMountpoint(resolve(options.mountpoint), log)
  // Built ahead: used only for the tree it was built as, and for a kept connection only when it is the table that connection was served from.
  const prepared = options.prepared !== undefined && (options.tree === undefined || options.tree === options.prepared.tree) &&
    (kept === undefined || kept.record.tableDigest === options.prepared.digest) ? options.prepared : undefined
  const tree = prepared?.tree ?? options.tree ?? mergeLayers(tocs)
  if (tree.conflicts.length > 0 && kept === undefined) {
    const first = tree.conflicts[0]!
    log(`mount ${mountpoint}: ${tree.conflicts.length} TOC entries skipped, first: layer ${first.layer} ${JSON.stringify(first.path)}: ${first.reason}`, 'warn')
  }
  const view = prepared?.view ?? new ImageView(tree)
  const files = new FileReader(tocs, reader)
  const boundary = new ErrnoBoundary({ log, storeName: reader.storeName, mountpoint })
  const fuseOptions = { ...DEFAULT_FUSE_OPTIONS, ...(options.hotFiles === undefined ? {} : { passthrough: true }), ...options.fuse }
  let backend = chooseBackend(fuseOptions)
  let fuse: FuseMount | undefined
  let serverCounters: () => KernelFuseCounters | undefined = () => undefined
  let adopted = false
  let passthrough: ImageMount['passthrough']
  let copies: PassthroughFiles | undefined
  const context = { view, files, boundary, log, onRead: (nodeid: number) => { copies?.read(nodeid) } }
  if (kept !== undefined) {
    try {
      const kernel = adoptKernelFuse(mountpoint, context, fuseOptions, kept, keeper!, prepared)
      serverCounters = kernel.counters
      fuse = kernel
      if (kernel.backings !== undefined) passthrough = { backings: kernel.backings, nodes: kernel.nodes }
      backend = 'kernel'
      adopted = true
    } catch (err) {
      // The connection ends (its readers get ENOTCONN) and the path is mounted afresh.
      log(`mount ${mountpoint}: ${describeError(err)}; mounting it again`, 'warn')
      keeper!.discard(kept)
      await prepareMountpoint(mountpoint, log)
    }
  }
  if (fuse === undefined && backend === 'kernel') {
    const kernel: KernelFuseMount = await mountKernelFuse(mountpoint, context, fuseOptions, keeper, options.source)
    serverCounters = kernel.counters
    fuse = kernel
    if (kernel.backings !== undefined) passthrough = { backings: kernel.backings, nodes: kernel.nodes }
  } else if (fuse === undefined) {
    fuse = await mountFuse(mountpoint, createFuseOps({ view, files, boundary, kernelReadOnly: fuseOptions.readOnly }), fuseOptions)
  }
  if (passthrough !== undefined && options.hotFiles !== undefined) {
    copies = new PassthroughFiles(passthrough, tocs, files, options.hotFiles.store, log, options.hotFiles.ids?.(mountpoint))
    copies.start(adopted)
  } else if (options.hotFiles !== undefined && backend === 'kernel' && fuseOptions.passthrough === true) {
    log(`mount ${mountpoint}: the kernel did not settle FUSE passthrough (Linux 6.9+ with CONFIG_FUSE_PASSTHROUGH): files are read through layerd`)
  }
  const storedBytes = referencedChunkBytes(tocs)
  return {
    mountpoint,
    view,
    backend,
    adopted,
    serverCounters,
    ...(passthrough === undefined ? {} : { passthrough }),
    stats: () => ({
      fetchedBytes: reader.fetchedBytes(),
      storedBytes,
      imageBytes: view.imageBytes,
      inodes: view.inodeCount,
      ...files.counters,
      ...boundary.counters,
      mergeConflicts: tree.conflicts.length
    }),
    unmount: async () => { await copies?.close(); await fuse!.unmount() }
  }
}

/** The mountImage() options that choose `backend` (undefined: the default). Sync. */
export function fuseOptions (backend: FuseBackend | undefined): { fuse?: { backend: FuseBackend } } {
  return backend === undefined ? {} : { fuse: { backend } }
}

/**
 * A FUSE backend's name (a setting: LAYERD_FUSE_BACKEND), checked. Sync.
 * Throws UsageError naming the value for anything but 'kernel' and 'fuse-native'.
 */
export function parseFuseBackend (name: string): FuseBackend {
  if (name === 'kernel' || name === 'fuse-native') return name
  throw new UsageError(`FUSE backend ${JSON.stringify(name)} is not 'kernel' or 'fuse-native' (LAYERD_FUSE_BACKEND)`)
}

/**
 * The backend for `options`: the one asked for, else 'kernel' when it can
 * serve these options. Sync. Throws UsageError for an unknown name; an
 * explicit 'kernel' that cannot run here fails in mountKernelFuse, with the reason.
 */
export function chooseBackend (options: FuseMountOptions): FuseBackend {
  if (options.backend !== undefined) return parseFuseBackend(options.backend)
  return kernelFuseUnavailable(options) === undefined ? 'kernel' : 'fuse-native'
}

/** Compressed bytes of the distinct chunks the TOCs reference. Sync. */
export function referencedChunkBytes (tocs: readonly LayerToc[]): number {
  const seen = new Set<string>()
  let bytes = 0
  for (const toc of tocs) {
    for (const c of toc.chunks) {
      if (seen.has(c.digest)) continue
      seen.add(c.digest)
      bytes += c.compressedLength
    }
  }
  return bytes
}

/** `path` with its parent's real path (created when missing); the last component is not touched (a mount may be there). Async. */
export async function canonicalPath (path: string): Promise<string> {
  const parent = await realpath(dirname(path)).catch(async (err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err
    await mkdir(dirname(path), { recursive: true })
    return await realpath(dirname(path))
  })
  return join(parent, basename(path))
}

/**
 * Make `mountpoint` ready: create it when missing; when a FUSE filesystem
 * is mounted there, detach it if its daemon is gone (ENOTCONN, left by a
 * killed layerd), refuse if it is alive. Returns the canonical path.
 */
async function prepareMountpoint (mountpoint: string, log: LogLine): Promise<string> {
  const canonical = await canonicalPath(mountpoint)
  const fstype = await mountedFsType(canonical)
  if (fstype === undefined) {
    await mkdir(canonical, { recursive: true })
    return canonical
  }
  if (!fstype.startsWith('fuse')) throw new UsageError(`cannot mount at ${canonical}: a ${fstype} filesystem is mounted there`)
  try {
    await statfs(canonical)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'ENOTCONN' && code !== 'ECONNABORTED') throw new UsageError(`cannot mount at ${canonical}: ${describeError(err)}`, { cause: err })
    log(`mount ${canonical}: cleaning a stale FUSE mount (${code}) left by a dead daemon`, 'warn')
    await lazyUnmount(canonical)
    return canonical
  }
  throw new UsageError(`cannot mount at ${canonical}: a live ${fstype} filesystem is already mounted there`)
}
