/**
 * The kernel-protocol FUSE backend: native/fuse_server.c serves the mount
 * from a metadata table (kernel-fuse-table.ts) on its own threads, and only
 * READ reaches JS, here. Compared with the fuse-native backend
 * (fuse-binding.ts + fuse-ops.ts), a metadata op costs no JS at all, the
 * kernel skips OPEN/OPENDIR and caches listings, and a read costs one
 * hand-off instead of two (JS writes the reply to /dev/fuse itself).
 * Measured in src/fs/README.md.
 *
 * Needs root (it mounts with mount(2), as libfuse does for root) and the
 * native addon; kernelFuseUnavailable() says why not, and image-mount.ts
 * then uses fuse-native.
 *
 * Takeover (src/holder/README.md): with a ConnectionKeeper, a new mount's
 * /dev/fuse fd and its record (INIT negotiation, options, table digest)
 * are kept outside this process, and adoptKernelFuse() serves a connection
 * an earlier daemon kept, without a new INIT, after checking that this
 * process builds the byte-identical table (node ids are its indices).
 *
 * Reads: cache hits are answered synchronously from a reused buffer; a miss
 * holds its own buffer until the fetch ends. Errors become errno only
 * through the ErrnoBoundary, as with fuse-native.
 *
 * May import: src/errors.ts, src/native.ts, src/format/, ./*.
 */
import { createHash } from 'node:crypto'
import { isDeepStrictEqual } from 'node:util'
import { UnsupportedError, UsageError, describeError } from '../errors.js'
import { MNT_DETACH, nativeFuseServer, nativeMounts, type NativeFuseEvent, type NativeFuseServer, type NativeFuseServerBinding, type NativeFuseServerOptions } from '../native.js'
import type { ErrnoBoundary } from './errno-boundary.js'
import type { FileReader } from './file-reader.js'
import { checkFsName, lazyUnmount, setReadAhead, type FuseMount, type FuseMountOptions } from './fuse-binding.js'
import { FUSE_ERRNOS } from './fuse-errnos.js'
import { fetchFailureErrno } from './fuse-ops.js'
import type { ImageView } from './image-view.js'
import type { MergedInode } from '../format/merge.js'
import { encodeKernelFuseTable, type KernelFuseTable } from './kernel-fuse-table.js'
import type { ConnectionKeeper, KeptConnection, TreeSource } from './kernel-fuse-keeper.js'
import type { LogLine } from '../log-line.js'

const EVENT_INIT = 1
const EVENT_READ = 2
const EVENT_CLOSED = 3
const PAGE_BYTES = 4096
/** The kernel's limit on pages per request (FUSE_MAX_MAX_PAGES). */
const MAX_PAGES = 256
/**
 * Read buffers kept for reuse, shared by every mount of the process (they
 * were 8 per mount: up to 8 MiB resident per mount after a read burst; 20
 * mounts, 160 MiB). More are allocated when reads wait on fetches.
 */
const SPARE_BUFFERS = 8
const sparesBySize = new Map<number, Buffer[]>()

export interface KernelFuseContext {
  view: ImageView
  files: FileReader
  boundary: ErrnoBoundary
  /** One line per event worth a human's attention. */
  log: LogLine
  /** Told of every READ's node id (passthrough-files.ts picks files to copy out). Sync; must not throw. */
  onRead?: (nodeid: number) => void
}

/** Counters of the server's own threads (requests it answered, by kind). */
export interface KernelFuseCounters {
  requests: number
  lookups: number
  readdirs: number
  opens: number
  reads: number
  repliesFailed: number
  /** Opens answered with FOPEN_PASSTHROUGH: that file's reads and mmap went to its backing file in the kernel. */
  passthroughOpens: number
}

/**
 * A connection's passthrough backing files (native/fuse_passthrough.h), where
 * INIT settled FUSE_PASSTHROUGH. Node ids are the table's. Sync; attach throws
 * with the kernel's errno (code) when it refuses the file.
 */
export interface PassthroughBackings {
  /** Register `fd` (read-only, the caller's to close) as `nodeid`'s backing file; returns its backing id. */
  attach: (nodeid: number, fd: number) => number
  /** Offer a backing id an earlier daemon registered on this connection (a takeover). */
  inherit: (nodeid: number, id: number) => void
  /** Stop offering `nodeid`'s backing file; open files keep reading it. */
  retire: (nodeid: number) => boolean
}

export interface KernelFuseMount extends FuseMount {
  counters: () => KernelFuseCounters
  /** Served from a connection an earlier daemon kept (no new mount, no INIT). */
  adopted: boolean
  /** Present when the connection has passthrough. */
  backings?: PassthroughBackings
  /** The served inodes by node id (index 0 and directories' ids included: undefined or not regular files). */
  nodes: ReadonlyArray<MergedInode | undefined>
}

/** sha256 hex of a metadata table: what a takeover compares. Sync. */
export function tableDigest (table: Buffer): string {
  return createHash('sha256').update(table).digest('hex')
}

/** The server options and mount(2) options for `options`. Sync. */
function serverSettings (options: FuseMountOptions): { server: NativeFuseServerOptions, maxRead: number, mountOptions: string } {
  const maxPages = Math.min(MAX_PAGES, Math.max(1, Math.ceil(options.maxReadBytes / PAGE_BYTES)))
  const maxRead = maxPages * PAGE_BYTES
  const mountOptions = [
    ...(options.allowOther ? ['allow_other'] : []),
    ...(options.defaultPermissions ? ['default_permissions'] : []),
    `max_read=${maxRead}`
  ].join(',')
  const server = {
    entryValidS: options.entryTimeoutS,
    attrValidS: options.attrTimeoutS,
    negativeValidS: options.negativeTimeoutS,
    maxPages,
    maxReadahead: Math.max(maxRead, (options.readAheadKiB ?? 0) * 1024),
    // Only when on: a record kept without the field still matches a daemon that does not ask for it.
    ...(options.passthrough === true ? { passthrough: 1 } : {})
  }
  return { server, maxRead, mountOptions }
}

/** Drop the spare read buffers of every mount (the daemon's memory settler, after a burst). Sync; returns the bytes dropped. */
export function releaseReadBuffers (): number {
  let bytes = 0
  for (const spare of sparesBySize.values()) {
    for (const b of spare) bytes += b.length
    spare.length = 0
  }
  return bytes
}

/** Why the kernel backend cannot serve `options` here, or undefined when it can. Sync. */
export function kernelFuseUnavailable (options: FuseMountOptions): string | undefined {
  if (process.getuid?.() !== 0) return 'it mounts with mount(2), which needs root'
  if (!options.readOnly) return 'it serves read-only mounts only'
  if (options.opTimeout !== undefined) return 'it has no per-op timeout'
  if (options.debug === true) return 'it has no debug output'
  try {
    nativeFuseServer()
  } catch (err) {
    return describeError(err)
  }
  return undefined
}

/**
 * Mount `context.view`'s tree at `mountpoint` (an existing, empty, unmounted
 * directory) and serve it. Async; resolves once the kernel's INIT is
 * answered. Rejects with UnsupportedError when the backend is unavailable,
 * UsageError when the mount fails (the kernel's reason included).
 */
export async function mountKernelFuse (mountpoint: string, context: KernelFuseContext, options: FuseMountOptions, keeper?: ConnectionKeeper, source?: TreeSource): Promise<KernelFuseMount> {
  const why = kernelFuseUnavailable(options)
  if (why !== undefined) throw new UnsupportedError(`the kernel FUSE backend cannot mount ${mountpoint}: ${why}`)
  checkFsName(options.fsName)
  const native = nativeFuseServer()
  const table = encodeKernelFuseTable(context.view)
  const { server: serverOptions, maxRead, mountOptions } = serverSettings(options)
  // The server keeps its own copy of the table; JS keeps only what reads need (not the bytes).
  const reads = new ReadServer(native, context, { inodes: table.inodes, pathOf: table.pathOf }, maxRead)
  let initDone: () => void = () => {}
  let closedEarly: () => void = () => {}
  const init = new Promise<void>((resolve, reject) => {
    initDone = resolve
    closedEarly = () => reject(new UsageError(`cannot mount FUSE at ${mountpoint}: the kernel ended the connection before INIT`))
  })
  let server: NativeFuseServer
  try {
    server = native.fuseServerMount(mountpoint, options.fsName, mountOptions, { ...serverOptions, errnos: FUSE_ERRNOS }, table.bytes, reads.onEvent(initDone, closedEarly))
  } catch (err) {
    throw new UsageError(`cannot mount FUSE at ${mountpoint}: ${describeError(err)}`, { cause: err })
  }
  reads.server = server
  // The server's threads do not hold the event loop; this timer does, until the kernel's INIT arrives.
  const keepAlive = setInterval(() => {}, 60_000)
  try { await init } finally { clearInterval(keepAlive) }
  if (options.readAheadKiB !== undefined) await setReadAhead(mountpoint, options.readAheadKiB)
  if (keeper !== undefined) {
    const negotiated = native.fuseServerInit(server)
    const { kernelMajor, kernelMinor, kernelFlags, kernelFlags2, replyFlags } = negotiated
    try {
      keeper.keep(native.fuseServerFd(server), {
        mountpoint,
        tableDigest: tableDigest(table.bytes),
        init: { kernelMajor, kernelMinor, kernelFlags, kernelFlags2, replyFlags },
        options: { ...serverOptions, maxReadahead: negotiated.maxReadahead },
        ...(source === undefined ? {} : { source })
      })
    } catch (err) {
      context.log(`mount ${mountpoint}: its FUSE connection is not kept, so it will not survive a daemon crash: ${describeError(err)}`, 'warn')
    }
  }
  return servedMount(native, server, mountpoint, false, keeper, table.inodes)
}

/**
 * Serve `kept`, a connection an earlier daemon mounted at `mountpoint` and
 * kept, from `context.view`, without a new INIT: the table this process
 * builds must be byte-identical to the one recorded (node ids are its
 * indices), and the server options equal. `prepared`: the table of
 * `context.view` and its digest, built ahead (used only when its view is
 * `context.view`). Sync. Throws UsageError naming the difference (the caller
 * then discards the connection and mounts afresh); on success the server owns `kept.fd`.
 */
export function adoptKernelFuse (mountpoint: string, context: KernelFuseContext, options: FuseMountOptions, kept: KeptConnection, keeper: ConnectionKeeper,
  prepared?: { view: ImageView, table: KernelFuseTable, digest: string }): KernelFuseMount {
  const why = kernelFuseUnavailable(options)
  if (why !== undefined) throw new UnsupportedError(`the kernel FUSE backend cannot take over ${mountpoint}: ${why}`)
  const native = nativeFuseServer()
  const ahead = prepared?.view === context.view ? prepared : undefined
  const table = ahead?.table ?? encodeKernelFuseTable(context.view)
  const { server: serverOptions, maxRead } = serverSettings(options)
  const digest = ahead?.digest ?? tableDigest(table.bytes)
  const { record } = kept
  if (digest !== record.tableDigest) {
    throw new UsageError(`cannot take over ${mountpoint}: this daemon builds a different metadata table (sha256 ${digest.slice(0, 16)}…, the connection was served from ${record.tableDigest.slice(0, 16)}…), so its node ids would not match`)
  }
  // max_readahead is what INIT settled (the kernel may ask for less): the rest must be as this daemon would mount now.
  if (!isDeepStrictEqual({ ...serverOptions, maxReadahead: 0 }, { ...record.options, maxReadahead: 0 })) {
    throw new UsageError(`cannot take over ${mountpoint}: it was served with options ${JSON.stringify(record.options)}, this daemon uses ${JSON.stringify(serverOptions)}`)
  }
  const reads = new ReadServer(native, context, { inodes: table.inodes, pathOf: table.pathOf }, maxRead)
  let server: NativeFuseServer
  try {
    server = native.fuseServerAttach(kept.fd, { ...record.options, errnos: FUSE_ERRNOS }, table.bytes, record.init, reads.onEvent(() => {}, () => {}))
  } catch (err) {
    throw new UsageError(`cannot take over ${mountpoint}: ${describeError(err)}`, { cause: err })
  }
  reads.server = server
  reads.live()
  const resendError = native.fuseServerInit(server).resendError
  if (resendError !== null) context.log(`take over ${mountpoint}: FUSE_NOTIFY_RESEND failed (${resendError}): requests the dead daemon had read are not answered`, 'warn')
  return servedMount(native, server, mountpoint, true, keeper, table.inodes)
}

function servedMount (native: NativeFuseServerBinding, server: NativeFuseServer, mountpoint: string, adopted: boolean, keeper: ConnectionKeeper | undefined,
  nodes: ReadonlyArray<MergedInode | undefined>): KernelFuseMount {
  let unmounting: Promise<void> | undefined
  const backings: PassthroughBackings | undefined = native.fuseServerInit(server).passthrough
    ? {
        attach: (nodeid, fd) => native.fuseServerBackingAttach(server, nodeid, fd),
        inherit: (nodeid, id) => { native.fuseServerBackingInherit(server, nodeid, id) },
        retire: nodeid => native.fuseServerBackingRetire(server, nodeid)
      }
    : undefined
  return {
    mountpoint,
    adopted,
    nodes,
    ...(backings === undefined ? {} : { backings }),
    counters: () => native.fuseServerCounters(server),
    unmount: async () => {
      unmounting ??= (async () => {
        try {
          nativeMounts().umount2(mountpoint, MNT_DETACH) // lazy: open files keep reading; the server ends when they close
        } catch (err) {
          await lazyUnmount(mountpoint, err as Error)
        }
        keeper?.forget(mountpoint)
      })()
      return await unmounting
    }
  }
}

/** Every kernel-backed mount this process serves, for dropColdPageCache(). */
const liveServers = new Set<ReadServer>()

/** What one dropColdPageCache() did. */
export interface PageCacheDrop {
  /** Mounts looked at, and files whose cached pages the kernel was told to drop. */
  mounts: number
  files: number
}

/**
 * Proactive reclaim of the page cache of image files (src/daemon/memory/memory-reclaimer.ts):
 * for every kernel-backed mount, FUSE_NOTIFY_INVAL_INODE on each file that
 * has been read since its last drop but not in the last `coldMs`. The
 * kernel drops those files' clean pages; a later read misses once and is
 * served again from the chunk cache. Only READs the kernel sends (page-cache
 * misses) count as reads: a file read wholly from the page cache looks cold.
 * Async; a connection that ended is skipped.
 */
export async function dropColdPageCache (coldMs: number): Promise<PageCacheDrop> {
  const now = performance.now()
  let files = 0
  let mounts = 0
  for (const reads of liveServers) {
    mounts++
    files += await reads.dropCold(now - coldMs)
  }
  return { mounts, files }
}

/** READ requests: FileReader into a buffer, the reply straight to /dev/fuse. */
class ReadServer {
  /** Set once the mount exists; no READ arrives before. */
  server!: NativeFuseServer
  readonly #spare: Buffer[]
  readonly #native: NativeFuseServerBinding
  readonly #context: KernelFuseContext
  readonly #table: Pick<KernelFuseTable, 'inodes' | 'pathOf'>
  readonly #bufferBytes: number
  /** Node id → when the kernel last asked for its data (performance.now()); cleared when its pages are dropped. */
  readonly #lastRead = new Map<number, number>()

  constructor (native: NativeFuseServerBinding, context: KernelFuseContext, table: Pick<KernelFuseTable, 'inodes' | 'pathOf'>, bufferBytes: number) {
    this.#native = native
    this.#context = context
    this.#table = table
    this.#bufferBytes = bufferBytes
    let spare = sparesBySize.get(bufferBytes)
    if (spare === undefined) sparesBySize.set(bufferBytes, spare = [])
    this.#spare = spare
  }

  /** The server's event callback: READs here, INIT and the connection's end to the given functions. */
  onEvent (initDone: () => void, closed: () => void): NativeFuseEvent {
    return (kind, unique, nodeid, offset, size) => {
      if (kind === EVENT_READ) this.read(unique, nodeid, offset, size)
      else if (kind === EVENT_INIT) { liveServers.add(this); initDone() }
      else if (kind === EVENT_CLOSED) { liveServers.delete(this); closed() } // after INIT this settles nothing
    }
  }

  /** Served (a takeover gets no INIT event). */
  live (): void { liveServers.add(this) }

  /** Tell the kernel to drop the pages of files last read before `before`. Resolves with how many. */
  async dropCold (before: number): Promise<number> {
    const cold: number[] = []
    for (const [nodeid, at] of this.#lastRead) {
      if (at < before) cold.push(nodeid)
    }
    if (cold.length === 0) return 0
    for (const nodeid of cold) this.#lastRead.delete(nodeid)
    try {
      return await this.#native.fuseServerInvalidate(this.server, Uint32Array.from(cold))
    } catch (err) {
      this.#context.log(`reclaim: cannot drop the page cache of ${cold.length} file(s): ${describeError(err)}`, 'warn')
      return 0
    }
  }

  read (unique: bigint, nodeid: number, offset: number, size: number): void {
    const inode = this.#table.inodes[nodeid]
    if (inode === undefined) { this.#native.fuseServerReplyError(this.server, unique, FUSE_ERRNOS.noEntry); return }
    this.#lastRead.set(nodeid, performance.now())
    this.#context.onRead?.(nodeid)
    const buf = this.#spare.pop() ?? Buffer.allocUnsafeSlow(Math.max(this.#bufferBytes, size))
    const { files, boundary } = this.#context
    let result: number | Promise<number>
    try {
      result = files.read(inode, offset, size, buf)
    } catch (err) {
      result = boundary.errno(err, 'read', this.#table.pathOf(nodeid))
    }
    if (typeof result === 'number') { this.#answer(unique, buf, result); return }
    result.then(n => this.#answer(unique, buf, n),
      (err: unknown) => this.#answer(unique, buf, fetchFailureErrno(files, boundary, err, inode, offset, size, this.#table.pathOf(nodeid))))
  }

  #answer (unique: bigint, buf: Buffer, result: number): void {
    try {
      if (result >= 0) this.#native.fuseServerReply(this.server, unique, buf, result)
      else this.#native.fuseServerReplyError(this.server, unique, -result || FUSE_ERRNOS.ioError)
    } finally {
      if (this.#spare.length < SPARE_BUFFERS && buf.length === this.#bufferBytes) this.#spare.push(buf)
    }
  }
}
