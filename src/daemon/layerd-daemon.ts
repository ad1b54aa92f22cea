/**
 * LayerdDaemon: the node's one daemon. Owns the chunk cache (one process
 * opens it), the stores, the mounts and the control socket; everything that
 * reads chunks goes through it so the cache is shared and survives.
 *
 * Lifecycle: `start()` takes the home's lock (home-lock.ts; refusing with
 * AlreadyRunningError while another daemon holds it) and writes the pid
 * file, opens the cache, recovers mounts left by a killed daemon, and
 * listens. `stop()` unmounts everything, closes the cache, removes the
 * socket and pid file and drops the lock. Both idempotent.
 *
 * Started by the holder (src/holder/) or by systemd with its fd store, the
 * daemon keeps every FUSE connection there: `start()` then takes over the
 * connections an earlier daemon kept (a crash or an upgrade: readers never
 * notice), and `handover()` exits without unmounting, for a planned restart.
 *
 * May import: everything below src/daemon.
 */
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { PullIncompleteError, UnsupportedError, UsageError } from '../errors.js'
import { LAYERD_EXIT } from '../exit-codes.js'
import type { ExportTarget } from '../materialize/export-image.js'
import { ensureHomeDir } from '../state/node-db.js'
import type { NodeDb } from '../state/node-db.js'
import { ControlServer } from './control/control-server.js'
import { AlreadyRunningError, HomeLock } from './control/home-lock.js'
import { expectedRejectionCount, unhandledRejectionCount } from './control/process-guards.js'
import {
  BadRequestError, socketPath, type ControlHandlers, type ControlMethod, type ControlParams, type DaemonCode, type DaemonMemoryResult, type ExportResult, type NodeStats, type PullResult
} from './client/control-protocol.js'
import type { MountManager, MountOptions } from './mounts/mount-manager.js'
import type { BlockViews } from './mounts/block-views.js'
import { readDaemonMemory } from './memory/memory-report.js'
import type { StorePool, StoreLocation } from './reading/store-pool.js'
import { MAX_SANDBOX_TIERS, observeSandboxCreate, sandboxCreates } from '../metrics/counters.js'
import { HeldConnections, readConnectionRecords } from '../holder/connection-keeper.js'
import type { PreparedTakeovers } from './mounts/prepared-takeovers.js'
import { setProcessNice } from '../host/thread-priority.js'
import type { ServingParts } from './serving-parts.js'
import type { LogLine } from '../log-line.js'

export interface DaemonConfig {
  home: string
  /** Cache cap in bytes; Infinity for none. */
  cacheBytes: number
  /** Mount again what a killed daemon had mounted. */
  restoreMounts: boolean
  log: LogLine
  /** How images are mounted (stacks, FUSE backend): settings resolved by layerd/main.ts. */
  mounts?: MountOptions
  /**
   * Proactive reclaim (memory-reclaimer.ts): the memory use, in bytes, above
   * which layerd frees what it put in memory; 'default' for half of the
   * limit where the daemon is charged (its cgroup's, or the node's); null: off.
   */
  memoryTarget?: number | 'default' | null
  /** How long a read retries a store that does not answer before it fails (EIO); default STORE_DEADLINE_MS (reading/store-pool.ts). */
  storeDeadlineMs?: number
  /** Started by the holder as a warm standby (HOLDER_STANDBY_ENV): wait, loaded, until told to take over. */
  warmStandby?: boolean
  /**
   * The nice value to serve at, when the holder started this daemon niced to prepare
   * (HOLDER_SERVE_NICE_ENV): every thread goes back to it when the daemon takes over.
   */
  serveNice?: number
  /** How long start() waits for the home's lock (a daemon handing over or stopping); default 0. */
  lockWaitMs?: number
  /**
   * Node upkeep that runs once per start, after the mounts are recovered and
   * before the socket listens; a failure is logged, never fatal. layerd/main.ts
   * passes the removal of sandboxes left by crashed callers (src/runtime/),
   * which the daemon itself knows nothing of.
   */
  sweepAtStart?: (db: NodeDb, log: LogLine) => Promise<void>
  /**
   * Servers started before the control socket listens (and before the holder
   * hears that the daemon serves), stopped first on stop
   * (layerd/main.ts passes containerd's snapshotter, src/snapshotter/, which
   * stands on the daemon's mounts). A service that fails to start stops the
   * daemon's start.
   */
  services?: Array<(parts: DaemonParts) => Promise<DaemonService>>
  /**
   * The services' code loading, run first in start(), before the daemon holds
   * anything: a warm standby or a planned restart's new daemon does it while
   * another daemon serves, so the reads it takes over never queue behind it
   * (layerd/main.ts: containerd's protos). A daemon that takes nothing over (a fresh start) skips it, so its
   * services load on first use. A failure is logged; the service's start then reports it.
   */
  preload?: Array<() => Promise<void>>
  /** `HOST:PORT` to serve Prometheus metrics on (src/metrics/); off when undefined. */
  /** How this process's code was loaded, reported by `ping` (layerd/main.ts). */
  code?: DaemonCode
  metricsAddr?: string
  /** Sandboxes on the node by tier and state, for `layerd_sandboxes` (layerd/main.ts passes src/runtime's registry). */
  sandboxStates?: (db: NodeDb) => Array<{ tier: string, state: string }>
}

/** What a service gets from the daemon: the node's database, mounts and stores. */
export interface DaemonParts { home: string, db: NodeDb, mounts: MountManager, stores: StorePool, log: LogLine }
/**
 * A running service. `handlers`: control methods it serves (the daemon answers
 * them while the service runs; before it starts, or without it, they fail
 * with UnsupportedError naming the method).
 */
export interface DaemonService { close: () => Promise<void>, handlers?: Partial<ControlHandlers> }

export { AlreadyRunningError }

/** Under a holder, how long a new daemon waits for the one handing over to release the home's lock. */
export const HANDOVER_LOCK_WAIT_MS = 30_000
/** A planned restart's reads of TOCs from the store, before it takes over, give up after this (the takeover then builds them). */
const PREPARE_RETRY_DEADLINE_MS = 5_000

export class LayerdDaemon {
  readonly config: DaemonConfig
  #parts: ServingParts | undefined
  /** Settles once the serving parts are open and the services run; every request waits for it. */
  #serving: Promise<void> | undefined
  #blockViews: Promise<BlockViews> | undefined
  #server: ControlServer | undefined
  #keeper: HeldConnections | undefined
  readonly #services: DaemonService[] = []
  #lock: HomeLock | undefined
  #metrics: { port: number, close: () => Promise<void> } | undefined
  #stopping: Promise<void> | undefined
  readonly startedAt = new Date()

  constructor (config: DaemonConfig) {
    this.config = config
  }

  get mounts (): MountManager { return this.#parts!.mounts }

  /**
   * Take the home's lock, listen on the control socket, then load and open
   * the serving parts (serving-parts.ts: database, cache, stores, mounts),
   * recover mounts and start the services. The socket accepts connections
   * from the moment it listens; their requests wait until the daemon
   * serves. Async; resolves once it serves; throws AlreadyRunningError, or
   * what opening the home or a service threw (after stopping).
   */
  async start (): Promise<void> {
    const { home, log } = this.config
    // Where a start's time goes (issue 19's failover stall): ms since the process began, at each phase's end.
    const phases: string[] = [`modules ${Math.round(performance.now())}`]
    const mark = (name: string): void => { phases.push(`${name} ${Math.round(performance.now())}`) }
    ensureHomeDir(home)
    const preload = async (): Promise<void> => {
      await loadServingModules()
      for (const load of this.config.preload ?? []) {
        try { await load() } catch (err) { log(`preloading a service: ${(err as Error).message}`, 'warn') }
      }
      mark('preload')
    }
    const store = HeldConnections.storeFromEnv(log)
    let prepared: PreparedTakeovers | undefined
    if (store?.kind === 'holder' && this.config.warmStandby === true) {
      await preload()
      // A warm standby: loaded, holding nothing (no lock, no fd), until the holder says the serving daemon is gone or hands over.
      // If the holder dies meanwhile, this throws: nothing would keep the connections, so this daemon must not serve.
      store.standby(true)
      this.#servePriority()
      mark('takeover')
    } else if (store?.kind === 'holder') {
      // A planned restart starts this daemon while the old one still serves: build the kept connections' trees and tables now,
      // so that once the old one has gone only the attach is left; then say it has loaded, and wait for the old one to go.
      const records = readConnectionRecords(home, log)
      if (records.length > 0) {
        await preload()
        prepared = await prepareTakeovers(records, log)
      }
      mark('prepare')
      try { store.standby() } catch (err) { log(`holder: ${(err as Error).message}`, 'warn') }
      this.#servePriority()
    }
    this.#lock = await HomeLock.acquire(home, this.config.lockWaitMs ?? (store?.kind === 'holder' ? HANDOVER_LOCK_WAIT_MS : 0))
    mark('lock')
    let served!: () => void
    let failed!: (err: unknown) => void
    this.#serving = new Promise<void>((resolve, reject) => { served = resolve; failed = reject })
    this.#serving.catch(() => {}) // the requests that wait see it; start() throws it
    try {
      this.#lock.writePidFile()
      const started = performance.now()
      this.#keeper = store === undefined ? undefined : HeldConnections.open(home, store, log)
      mark('fds')
      // Listen first: a client's connect and first request need not wait for the code below to load (layerctl's own start overlaps it).
      this.#server = new ControlServer(this.#handlers(), log)
      await this.#server.listen(socketPath(home))
      mark('listen')
      const { openServingParts } = await loadServingModules()
      mark('modules')
      const parts = openServingParts({
        home, cacheBytes: this.config.cacheBytes, memoryTarget: this.config.memoryTarget ?? 'default', ...(this.config.storeDeadlineMs === undefined ? {} : { storeDeadlineMs: this.config.storeDeadlineMs }), log, mark,
        ...(this.config.mounts === undefined ? {} : { mounts: this.config.mounts }),
        ...(this.#keeper === undefined ? {} : { keeper: this.#keeper }), ...(prepared === undefined ? {} : { prepared })
      })
      this.#parts = parts
      mark('open')
      const kept = this.#keeper?.availableCount ?? 0
      const { cleaned, restored, adopted } = await parts.mounts.recover(this.config.restoreMounts)
      if (cleaned > 0 || kept > 0) {
        log(`recovered ${cleaned} mount(s) left by an earlier daemon; ${restored} mounted again; took over ${adopted} image(s) on ${kept} kept FUSE connection(s), ${Math.round(performance.now() - started)} ms after the lock` +
          (prepared === undefined ? '' : `; used the trees and tables of ${prepared.taken} of ${prepared.count} connection(s), built ahead in ${prepared.ms} ms before the lock`))
      }
      mark('recover')
      await this.config.sweepAtStart?.(parts.db, log).catch(err => { log(`start-up sweep: ${(err as Error).message}`, 'warn') })
      mark('sweep')
      // The services (containerd's snapshotter) start before the holder hears that this daemon serves, and before
      // the control socket answers: whoever is answered (layerctl, `daemon restart`) finds their sockets up too.
      for (const start of this.config.services ?? []) {
        this.#services.push(await start({ home, db: parts.db, mounts: parts.mounts, stores: parts.stores, log }))
      }
      // Only now: a service (containerd's snapshotter) takes over the kept connections of its own mounts as it recovers.
      await parts.mounts.releaseUntakenConnections()
      mark('services')
      served()
      // The answers that waited for this go out first: a holder still booting beside this daemon (its C front
      // started both, src/holder/README.md) reads `ready` only once it is up (ready() does not wait for its answer).
      await new Promise(resolve => setImmediate(resolve))
      this.#keeper?.ready()
      log(`start phases (ms since the process began): ${phases.join(', ')}`)
      const keptBy = this.#keeper === undefined ? '' : `, FUSE connections kept by ${this.keptBy ?? `none (the ${this.#keeper.store.kind} is gone)`}`
      log(`layerd ${process.pid} serving ${socketPath(home)}, cache ${parts.cache.location}${keptBy}`)
      if (this.config.metricsAddr !== undefined) {
        // prom-client and the registry are loaded only when metrics are on (idle RSS).
        const { createDaemonRegistry, serveMetrics } = await import('../metrics/daemon-metrics.js')
        const registry = createDaemonRegistry({ nodeStats: () => this.#nodeStats(), sandboxes: () => this.config.sandboxStates?.(parts.db) ?? [] })
        this.#metrics = await serveMetrics(registry, this.config.metricsAddr, log)
      }
    } catch (err) {
      failed(err)
      await new Promise(resolve => setImmediate(resolve)) // the requests that waited are answered with it before the socket closes
      await this.stop()
      throw err
    }
  }

  /** Back to the serving priority (config.serveNice), on every thread, once this daemon is to take over. Sync; never throws. */
  #servePriority (): void {
    if (this.config.serveNice === undefined) return
    try { setProcessNice(this.config.serveNice) } catch (err) { this.config.log(`cannot go back to nice ${this.config.serveNice}: ${(err as Error).message}`, 'warn') }
  }

  /**
   * Open the store at `loc` and, if it is remote, do its one-time client
   * set-up in the background (ObjectStore.warm). Sync; never throws: a bad
   * location is reported by the first request that uses it.
   */
  warmStore (loc: StoreLocation): void {
    try {
      const { store } = this.#parts!.stores.get(loc)
      if (store.remote === true) void store.warm?.()
    } catch (err) {
      this.config.log(`cannot open the node's store ${loc.store}: ${(err as Error).message}`, 'warn')
    }
  }

  /** Unmount everything and release the node. Idempotent. */
  async stop (): Promise<void> {
    this.#stopping ??= (async () => {
      await this.#server?.close()
      await this.#metrics?.close()
      for (const service of this.#services.splice(0).reverse()) await service.close().catch(err => { this.config.log(`stopping a service: ${(err as Error).message}`, 'warn') })
      await this.#parts?.close()
      rmSync(socketPath(this.config.home), { force: true })
      this.#lock?.release()
    })()
    await this.#stopping
  }

  /**
   * A planned restart (SIGUSR2 from the holder): stop answering the control
   * socket and leave every mount as it is, for the next daemon to take over.
   * The caller exits right after. Reads in flight are not answered here: the
   * kernel resends them to the next daemon (FUSE_NOTIFY_RESEND), so none
   * fails. Async; idempotent with stop().
   *
   * The home's lock is not released here: the kernel drops it when this
   * process has ended, after the last of its FUSE server threads. Released
   * earlier, the next daemon could attach and send FUSE_NOTIFY_RESEND while
   * those threads still read requests, and a request read after the resend
   * would never be answered (its reader hangs); it would also open the chunk
   * cache while this process still has it open. The pid file is left for the
   * next daemon to replace.
   */
  async handover (): Promise<void> {
    this.#stopping ??= (async () => {
      await this.#server?.close()
      rmSync(socketPath(this.config.home), { force: true })
    })()
    await this.#stopping
  }

  /** Who keeps the FUSE connections: 'holder', 'systemd', or null (they die with this daemon: none, or the holder died). */
  get keptBy (): 'holder' | 'systemd' | null { return this.#keeper === undefined || this.#keeper.storeGone ? null : this.#keeper.store.kind }

  /**
   * The control API (control-protocol.ts): params arrive checked against the
   * map. Every method, `ping` too, first waits until the daemon serves
   * (start()), and fails with start's error if it does not: a client that is
   * answered finds the mounts recovered and the services' sockets up (the
   * holder and the takeover tests count a layerd as serving from its first
   * answer, and restart one killed before it served with a backoff).
   */
  #handlers (): ControlHandlers {
    const serving = async (): Promise<ServingParts> => { await this.#serving; return this.#parts! }
    const handlers: ControlHandlers = {
      ping: async () => { await serving(); return { pid: process.pid, home: this.config.home, startedAt: this.startedAt.toISOString(), connectionsKeptBy: this.keptBy, ...(this.config.code === undefined ? {} : { code: this.config.code }) } },
      mount: async p => await (await serving()).mounts.mount(p),
      umount: async p => { await (await serving()).mounts.unmount(p.mountpoint); return {} },
      mounts: async () => (await serving()).mounts.list(),
      image: async p => await (await serving()).mounts.shared(p),
      blockView: async p => { await serving(); return await (await this.#loadBlockViews()).ensure(p) },
      stats: async p => {
        const { mounts, cache } = await serving()
        return p.mountpoint === undefined ? this.#nodeStats() : { ...mounts.stats(p.mountpoint), cache: cache.stats() }
      },
      prefetch: async p => {
        const { chunks, traced, done } = (await serving()).mounts.prefetch(p.mountpoint)
        return p.wait === true ? { chunks, traced, ...(await done) } : { chunks, traced, started: true }
      },
      publishTrace: async p => await (await serving()).mounts.publishTrace(p),
      sandboxCreated: async p => {
        if (!/^[a-z][a-z0-9-]{0,31}$/.test(p.tier)) throw new BadRequestError(`sandboxCreated: tier ${JSON.stringify(p.tier).slice(0, 60)} is not a tier name`)
        if (!observeSandboxCreate(p.tier, p.seconds)) this.config.log(`sandboxCreated: more than ${MAX_SANDBOX_TIERS} tiers reported; ${p.tier} not recorded`, 'warn')
        return {}
      },
      gcNode: async p => {
        const { db, cache, stores, mounts } = await serving()
        const { collectNode } = await import('./mounts/node-gc.js')
        return await collectNode({ db, cache, store: stores.get(p).store, liveManifests: mounts.liveManifests(), sharedDir: mounts.sharedDir, log: this.config.log }, { dryRun: p.dryRun === true })
      },
      pull: async p => await this.#pull(await serving(), p),
      export: async p => await this.#export(await serving(), p),
      containerdPull: async p => { await serving(); return await this.#serviceHandler('containerdPull', 'no containerd snapshotter runs in this layerd')(p) },
      memory: async p => {
        const { settler, reclaimer } = await serving()
        if (p.settle === true) await settler.settle()
        if (p.reclaim === true) {
          if (reclaimer === undefined) throw new UsageError('memory reclaim: reclaim is off in this daemon (--memory-target off)')
          await reclaimer.reclaim(0, true) // now: every file read since the last pass loses its page cache
        }
        return this.#memory()
      },
      shutdown: async () => {
        await serving().catch(() => {}) // a failed start stops by itself
        setImmediate(() => {
          this.stop().then(() => process.exit(LAYERD_EXIT.OK), err => {
            this.config.log(`shutdown failed: ${(err as Error)?.stack ?? String(err)}`, 'error')
            process.exit(LAYERD_EXIT.FAILURE)
          })
        })
        return {}
      }
    }
    return handlers
  }

  /** The running service's handler of `method`, or one that throws UnsupportedError saying `missing`. */
  #serviceHandler<M extends ControlMethod> (method: M, missing: string): ControlHandlers[M] {
    for (const service of this.#services) {
      const handler = service.handlers?.[method]
      if (handler !== undefined) return handler
    }
    return (async () => { throw new UnsupportedError(`${method}: ${missing}`) }) as unknown as ControlHandlers[M]
  }

  /** Node-wide figures: what `stats` without a mountpoint answers, and what /metrics reads. */
  #nodeStats (): NodeStats {
    const { cache, stores, mounts } = this.#parts!
    return { cache: cache.stats(), fetch: stores.fetchTotals(), mounts: mounts.list().length, daemon: { pid: process.pid, unhandledRejections: unhandledRejectionCount(), expectedRejections: expectedRejectionCount() }, memory: this.#memory(), sandboxCreates: Object.fromEntries([...sandboxCreates].map(([tier, h]) => [tier, { count: h.count, sumSeconds: h.sum }])) }
  }

  /** The metrics server's port (0-port configs bind an ephemeral one), or undefined when off. */
  get metricsPort (): number | undefined { return this.#metrics?.port }

  async #pull (parts: ServingParts, p: ControlParams<'pull'>): Promise<PullResult> {
    const { store, fetcher } = parts.stores.get(p)
    const [{ loadImage }, { allChunks }] = await Promise.all([import('../image/load-image.js'), import('./reading/image-chunks.js')])
    const image = await loadImage(store, p.image, { cache: parts.cache })
    const result = { manifest: image.digest, layers: image.tocs.length, metadataBytes: image.fetchedBytes, chunks: 0, fetchedBytes: 0, failed: 0 }
    if (p.all === true) {
      const before = fetcher.stats.fetchedBytes
      const r = await fetcher.prefetch(allChunks(image))
      result.chunks = r.requested
      result.failed = r.failed
      result.fetchedBytes = fetcher.stats.fetchedBytes - before
      if (r.failed > 0) throw new PullIncompleteError(`pull ${p.image}: ${r.failed} of ${r.requested} chunks could not be fetched from ${store.url} (see the layerd log)`)
    }
    return result
  }

  async #export (parts: ServingParts, p: ControlParams<'export'>): Promise<ExportResult> {
    if ((p.tarFile === undefined) === (p.directory === undefined)) {
      throw new BadRequestError(`control request export: exactly one of params.tarFile and params.directory is needed, got ${p.tarFile === undefined ? 'neither' : 'both'}`)
    }
    const target: ExportTarget = p.tarFile !== undefined ? { tarFile: p.tarFile } : { directory: p.directory! }
    const { store, fetcher } = parts.stores.get(p)
    const { loadImage } = await import('../image/load-image.js')
    const image = await loadImage(store, p.image, { cache: parts.cache })
    const before = fetcher.stats.fetchedBytes
    // Loaded on first use, like the block views: an idle daemon holds none of the export code (issue 14).
    const { exportImage } = await import('../materialize/export-image.js')
    let result
    try { result = await exportImage(image, fetcher, target) } finally { parts.settler.touch() }
    return { manifest: image.digest, ...result, fetchedBytes: fetcher.stats.fetchedBytes - before }
  }

  /** The daemon's memory and its settler's counters (`stats`, `memory`). */
  #memory (): DaemonMemoryResult {
    const { settler, reclaimer, pageCopies } = this.#parts!
    return { ...readDaemonMemory(), settle: { ...settler.stats }, ...(reclaimer === undefined ? {} : { reclaim: { ...reclaimer.stats, ...pageCopies.stats } }) }
  }

  /** The block views, their module (ext4 builder, push) loaded on first use. */
  async #loadBlockViews (): Promise<BlockViews> {
    this.#blockViews ??= import('./mounts/block-views.js').then(({ BlockViews }) =>
      new BlockViews(this.#parts!.mounts, this.#parts!.stores, this.#parts!.cache, this.#parts!.db, join(this.config.home, 'tmp'), this.config.log))
    return await this.#blockViews
  }
}

/** The serving parts' code (most of the daemon's modules and its addons), loaded once. Async. */
async function loadServingModules (): Promise<typeof import('./serving-parts.js')> {
  servingModules ??= import('./serving-parts.js')
  return await servingModules
}
let servingModules: Promise<typeof import('./serving-parts.js')> | undefined

/** A planned restart's trees and tables of the kept connections, built before the lock (prepared-takeovers.ts). Async. */
async function prepareTakeovers (records: ReturnType<typeof readConnectionRecords>, log: LogLine): Promise<PreparedTakeovers> {
  const [{ PreparedTakeovers }, { openStore }, { mountedFsType }] = await Promise.all([
    import('./mounts/prepared-takeovers.js'), import('../store/open-store.js'), import('../fs/fuse-binding.js')
  ])
  return await PreparedTakeovers.prepare(records,
    loc => openStore(loc.store, { retry: { deadlineMs: PREPARE_RETRY_DEADLINE_MS }, ...(loc.s3Endpoint === undefined ? {} : { s3Endpoint: loc.s3Endpoint }) }),
    log, async mountpoint => (await mountedFsType(mountpoint))?.startsWith('fuse') === true)
}
