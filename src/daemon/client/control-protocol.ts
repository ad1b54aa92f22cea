/**
 * The control API between layerctl and layerd: newline-delimited JSON over a
 * Unix socket (`<home>/layerd.sock`, mode 0600: root only).
 *
 *   → { "id": 1, "method": "mount", "params": { … } }
 *   ← { "id": 1, "result": … }   or   { "id": 1, "error": { "code": "ERR_NOT_FOUND", "message": "…" } }
 *
 * This module is the one map of the API, shared by client and server:
 * `CONTROL_PARAMS` says, per method, which params it takes and of what JSON
 * type; the TypeScript param types are derived from it (so the server's
 * checks and the client's types cannot drift apart), and `ControlResults`
 * gives each method's result. control-request.ts checks a request line
 * against the map before any handler runs.
 *
 * Errors keep their LayerdError code across the socket, so the CLI prints
 * the daemon's message as if it were its own. A request the daemon cannot
 * take (not JSON, not an object, an unknown method, a missing or mistyped
 * param) is answered with ERR_BAD_REQUEST naming the method and the field;
 * a request without a usable `id` is answered with `"id": null`.
 *
 * This file, control-client.ts and daemon-launcher.ts are the daemon's
 * client side (the `daemon-client` layer in layers.json): the only part of
 * src/daemon/ that src/sandbox/ and src/cli/ may import. The results that
 * cross the socket are typed here, so clients never import the daemon's
 * internals for a type (the server's handlers are checked against these
 * types when the daemon compiles).
 *
 * May import: src/errors.ts, src/format/ and src/fs/ (types only), node built-ins.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { BadRequestError } from '../../errors.js'
import type { Digest } from '../../format/digest.js'
import type { OciImageConfig } from '../../format/manifest.js'
import type { ImageMountStats } from '../../fs/image-mount.js'
import type { KernelFuseCounters } from '../../fs/kernel-fuse.js'

export const SOCKET_NAME = 'layerd.sock'
export const PID_FILE_NAME = 'layerd.pid'
/** A request line longer than this (bytes, newline excluded) is answered with ERR_BAD_REQUEST and skipped. */
export const MAX_REQUEST_BYTES = 1024 * 1024

export const socketPath = (home: string): string => join(home, SOCKET_NAME)
export const pidFilePath = (home: string): string => join(home, PID_FILE_NAME)

export { BadRequestError }

/**
 * How one param is checked. `string`: a JSON string without NUL; `path`: such
 * a string that is an absolute path (the daemon does not share the caller's
 * working directory); `boolean`: true or false. A trailing `?`: may be absent.
 */
export type FieldSpec = 'string' | 'string?' | 'path' | 'path?' | 'boolean' | 'boolean?' | 'number'

const STORE = { store: 'string', s3Endpoint: 'string?' } as const

/** Every method and its params: the runtime half of the map. */
export const CONTROL_PARAMS = {
  ping: {},
  mount: { image: 'string', mountpoint: 'path', ...STORE },
  umount: { mountpoint: 'path' },
  mounts: {},
  image: { image: 'string', ...STORE },
  blockView: { image: 'string', ...STORE },
  stats: { mountpoint: 'path?' },
  prefetch: { mountpoint: 'path', wait: 'boolean?' },
  publishTrace: { image: 'string', ...STORE },
  gcNode: { dryRun: 'boolean?', ...STORE },
  sandboxCreated: { tier: 'string', seconds: 'number' },
  pull: { image: 'string', all: 'boolean?', ...STORE },
  export: { image: 'string', tarFile: 'path?', directory: 'path?', ...STORE },
  memory: { settle: 'boolean?', reclaim: 'boolean?' },
  /** `layerctl containerd pull` of a layerd image, run by the daemon's containerd snapshotter (src/snapshotter/containerd-pull.ts). */
  containerdPull: { image: 'string', address: 'path', namespace: 'string', name: 'string?', ...STORE },
  shutdown: {}
} as const satisfies Record<string, Readonly<Record<string, FieldSpec>>>

export type ControlMethod = keyof typeof CONTROL_PARAMS

type FieldType<S> = S extends 'boolean' | 'boolean?' ? boolean : S extends 'number' ? number : string
type Flatten<T> = { [K in keyof T]: T[K] }
type ParamsFromSpec<S> = Flatten<
  { [K in keyof S as S[K] extends `${string}?` ? never : K]: FieldType<S[K]> } &
  { [K in keyof S as S[K] extends `${string}?` ? K : never]?: FieldType<S[K]> }
>

/** The params of `M`, as the server receives them once checked. */
export type ControlParams<M extends ControlMethod> = ParamsFromSpec<(typeof CONTROL_PARAMS)[M]>

/** The pid recorded in `<home>/layerd.pid`, or undefined (no file, not a pid). Sync; says nothing about liveness. */
export function readDaemonPid (home: string): number | undefined {
  let text: string
  try { text = readFileSync(pidFilePath(home), 'utf8') } catch { return undefined }
  const pid = Number(text.trim())
  return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined
}

/**
 * The chunk cache's counters as they cross the socket (src/cache's
 * ChunkCacheStats, which the daemon's handlers must satisfy). `capBytes` is
 * null when uncapped (JSON has no Infinity).
 */
export interface CacheCounters {
  bytes: number
  chunks: number
  metaBytes: number
  metaObjects: number
  pinned: number
  hits: number
  misses: number
  evictions: number
  rejected: number
  writeErrors: number
  writeFailures: number
  skippedWrites: number
  writesFailing: boolean
  capBytes: number | null
  diskBytes: number
}

/** What a prefetch that was waited for did (src/cache's PrefetchResult). */
export interface PrefetchCounts { requested: number, cached: number, fetched: number, failed: number }

export interface PingResult {
  pid: number
  home: string
  startedAt: string
  /** Who keeps the daemon's FUSE connections across its restarts: 'holder', 'systemd', or null (they die with it). */
  connectionsKeptBy: 'holder' | 'systemd' | null
  /** What the process runs: the one-file bundle (layerd/layerd.cts) with what became of its code cache, or the unbundled modules (dist/layerd/main.js). */
  code?: DaemonCode
}
/** How the daemon's code was loaded (src/start/cached-script.cts). */
export interface DaemonCode { bundle: boolean, codeCache?: 'accepted' | 'missing' | 'stale' | 'rejected' }
/** Node-wide counters (`stats` without a mountpoint). */
export interface NodeStats {
  cache: CacheCounters
  fetch: { fetchedBytes: number, fetches: number, corruptChunks: number, storeErrors: number }
  mounts: number
  /** This daemon: its pid, errors nobody awaited (logged with their stack), and known library leftovers (process-guards.ts). */
  daemon: { pid: number, unhandledRejections: number, expectedRejections: number }
  memory: DaemonMemoryResult
  /** Sandbox creations reported by their creators (control method sandboxCreated), by tier. */
  sandboxCreates: Record<string, { count: number, sumSeconds: number }>
}

/** Where the daemon's memory is (src/daemon/memory/memory-report.ts), and what its settler gave back (memory-settler.ts). Bytes. */
export interface DaemonMemoryResult {
  /** VmRSS, RssAnon, RssFile, VmHWM of /proc/self/status; Pss of smaps_rollup. */
  rssBytes: number
  rssAnonBytes: number
  rssFileBytes: number
  peakRssBytes: number
  pssBytes: number
  v8: { heapTotalBytes: number, heapUsedBytes: number, externalBytes: number, arrayBufferBytes: number }
  /** glibc's mallinfo2 (absent without the native addon). */
  malloc?: { arenaBytes: number, mmapBytes: number, inUseBytes: number, freeBytes: number, topReleasableBytes: number }
  settle: { settles: number, lastSettleAt?: string, lastRssBeforeBytes?: number, lastRssAfterBytes?: number, lastSettleMs?: number }
  /** Proactive reclaim (memory-reclaimer.ts); absent when off (`--memory-target off`). */
  reclaim?: ReclaimStats
}
/** One mount's counters (`stats` with a mountpoint). */
export type MountStatsResult = MountStats & { cache: CacheCounters }
export type PrefetchAnswer = { chunks: number, traced: number } & ({ started: true } | PrefetchCounts)
/** Proactive reclaim's counters (src/daemon/memory/memory-reclaimer.ts). */
export interface ReclaimStats {
  targetBytes: number
  /** What use is measured on: a cgroup, or the node. */
  gauge: string
  passes: number
  /** Files whose page cache the kernel was told to drop, over every pass. */
  filesDropped: number
  /** Full GCs run while over the target because anonymous memory grew (memory-reclaimer.ts). */
  collections?: number
  /** Settling passes run because a burst of chunk reads ended while over the target (memory-reclaimer.ts). */
  burstEnds?: number
  lastPassAt?: string
  lastPassMs?: number
  /** Use before and after the last pass (the gauge's bytes). */
  lastUsedBeforeBytes?: number
  lastUsedAfterBytes?: number
  lastReading?: { usedBytes: number, limitBytes: number, psiSomeAvg10: number | undefined }
  /** layerd's own page-cache copies dropped while over the target (src/daemon/memory/page-copies.ts). */
  storeReadsDropped?: number
  storeBytesDropped?: number
  cacheFileDrops?: number
}
/** What src/daemon/memory/page-copies.ts dropped (part of ReclaimStats). */
export type PageCopyStats = Required<Pick<ReclaimStats, 'storeReadsDropped' | 'storeBytesDropped' | 'cacheFileDrops'>>
/** `layerctl gc node`, the daemon's half (src/daemon/mounts/node-gc.ts). */
export interface NodeGcResult {
  dryRun: boolean
  /** Traces of manifests the store no longer holds, removed; traces kept. */
  traces: { removed: string[], kept: number }
  /** Directories under `<home>/images` with nothing mounted, removed. */
  mountDirs: { removed: string[] }
  /** Cached metadata objects no mount pins, dropped. */
  metadata: { objects: number, bytes: number }
}
/** `layerctl trace publish`: the trace object written (src/image/published-traces.ts). */
export interface PublishTraceResult { manifest: string, key: string, chunks: number }
export interface PullResult { manifest: string, layers: number, metadataBytes: number, chunks: number, fetchedBytes: number, failed: number }
export interface ExportResult { manifest: string, entries: number, contentBytes: number, fetchedBytes: number }
/**
 * `layerctl containerd pull`: the image record's name, its manifest, how many
 * layers were prepared as remote snapshots or already there, and the time of
 * each phase in ms: `manifest+lease`; `content` (the two content writes) and
 * `layers` (each layer's Stat and Prepare), which run at once, and
 * `content+layers`, their wall time; `image`; `release`.
 */
export interface ContainerdPullResult { name: string, manifest: string, layers: number, remote: number, alreadyThere: number, ms: number, phases: Record<string, number> }
type Empty = Record<string, never>

/** Every method's result: the other half of the map. */
export interface ControlResults {
  ping: PingResult
  mount: MountInfo
  umount: Empty
  mounts: MountInfo[]
  image: SharedImage
  blockView: BlockViewInfo
  stats: NodeStats | MountStatsResult
  prefetch: PrefetchAnswer
  publishTrace: PublishTraceResult
  gcNode: NodeGcResult
  sandboxCreated: Empty
  pull: PullResult
  export: ExportResult
  memory: DaemonMemoryResult
  containerdPull: ContainerdPullResult
  shutdown: Empty
}

// The two halves name the same methods (a compile error otherwise).
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never] ? true : never
const mapsAgree: SameKeys<typeof CONTROL_PARAMS, ControlResults> = true
void mapsAgree

/** The server's side: one handler per method, params already checked. */
export type ControlHandlers = { [M in ControlMethod]: (params: ControlParams<M>) => Promise<ControlResults[M]> }

/** The params argument of a client call: optional when every param is. */
export type ControlCallArgs<M extends ControlMethod> = object extends ControlParams<M> ? [params?: ControlParams<M>] : [params: ControlParams<M>]

export interface ControlRequest<M extends ControlMethod = ControlMethod> { id: number, method: M, params: ControlParams<M> }
export interface ControlError { code: string, message: string }
export type ControlResponse = { id: number, result: unknown } | { id: number | null, error: ControlError }

/** Whether `name` is a method of the map (own keys only: `__proto__`, `toString`, … are not). */
export function isControlMethod (name: string): name is ControlMethod {
  return Object.hasOwn(CONTROL_PARAMS, name)
}

/** What a sandbox needs to run an image: its read-only root and its config. */
export interface SharedImage { mountpoint: string, manifest: string, config: OciImageConfig, mountMs: number }

export interface MountInfo {
  mountpoint: string
  image: string
  manifest: string
  store: string
  mountedAt: string
  /** Milliseconds from request to a served mount. */
  mountMs: number
}

export interface MountStats extends ImageMountStats {
  mountpoint: string
  image: string
  fetches: number
  prefetchedChunks: number
  storeErrors: number
  /** The FUSE requests the kernel sent this mount, by kind (the kernel backend's server counts them; absent on fuse-native). */
  fuseOps?: KernelFuseCounters
}

/** The result of `blockView`: an image's block view, mounted. */
export interface BlockViewInfo {
  /** The raw ext4 file, on a layerd mount. */
  path: string
  /** The image's manifest and config (the VM runs the image's config, not the block view's). */
  manifest: Digest
  config: OciImageConfig
  /** Milliseconds spent building and pushing it (0 when it was in the store). */
  buildMs: number
}
