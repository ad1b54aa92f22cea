/**
 * LayerdDaemon: the node's one daemon. Owns the chunk cache (one process
 * opens it), the stores, the mounts and the control socket; everything that
 * reads chunks goes through it so the cache is shared and survives.
 *
 * Lifecycle: `start()` takes the pid file (refusing if another daemon is
 * alive), opens the cache, recovers mounts left by a killed daemon, and
 * listens. `stop()` unmounts everything, closes the cache and removes the
 * socket and pid file. Both idempotent.
 *
 * May import: everything below src/daemon.
 */
import { openSync, writeSync, closeSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { AlreadyRunningError, PullIncompleteError, UsageError } from '../errors.js'
import { LmdbChunkCache } from '../cache/lmdb-chunk-cache.js'
import { loadImage } from '../image/load-image.js'
import { exportImage, type ExportTarget } from '../materialize/export-image.js'
import { ensureHomeDir, openNodeDb, type NodeDb } from '../state/node-db.js'
import { ControlServer } from './control-server.js'
import { pidFilePath, socketPath } from './control-protocol.js'
import { MountManager, allChunks } from './mount-manager.js'
import { BlockViews } from './block-views.js'
import { StorePool, type StoreLocation } from './store-pool.js'

export interface DaemonConfig {
  home: string
  /** Cache cap in bytes; Infinity for none. */
  cacheBytes: number
  /** Mount again what a killed daemon had mounted. */
  restoreMounts: boolean
  log: (line: string) => void
  /**
   * Node upkeep that runs once per start, after the mounts are recovered and
   * before the socket listens; a failure is logged, never fatal. layerd/main.ts
   * passes the removal of sandboxes left by crashed callers (src/runtime/),
   * which the daemon itself knows nothing of.
   */
  sweepAtStart?: (db: NodeDb, log: (line: string) => void) => Promise<void>
}

/** Documented exit codes of `layerd`. */
export const LAYERD_EXIT = { OK: 0, FAILURE: 1, USAGE: 2, ALREADY_RUNNING: 3, CANNOT_OPEN_HOME: 4 } as const

export { AlreadyRunningError }

interface PullParams extends StoreLocation { image: string, all?: boolean }
interface ExportParams extends StoreLocation { image: string, tarFile?: string, directory?: string }

export class LayerdDaemon {
  readonly config: DaemonConfig
  #db: NodeDb | undefined
  #cache: LmdbChunkCache | undefined
  #stores: StorePool | undefined
  #mounts: MountManager | undefined
  #blockViews: BlockViews | undefined
  #server: ControlServer | undefined
  #stopping: Promise<void> | undefined
  readonly startedAt = new Date()

  constructor (config: DaemonConfig) {
    this.config = config
  }

  get mounts (): MountManager { return this.#mounts! }

  async start (): Promise<void> {
    const { home, log } = this.config
    ensureHomeDir(home)
    this.#takePidFile()
    try {
      this.#db = openNodeDb(home)
      this.#cache = LmdbChunkCache.open(join(home, 'cache'), { capBytes: this.config.cacheBytes, log })
      this.#stores = new StorePool(this.#cache, log)
      this.#mounts = new MountManager(this.#db, this.#cache, this.#stores, log, join(home, 'images'))
      this.#blockViews = new BlockViews(this.#mounts, this.#stores, this.#cache, this.#db, join(home, 'tmp'), log)
      const { cleaned, restored } = await this.#mounts.recover(this.config.restoreMounts)
      if (cleaned > 0) log(`recovered ${cleaned} mount(s) left by an earlier daemon; ${restored} mounted again`)
      await this.config.sweepAtStart?.(this.#db, log).catch(err => { log(`start-up sweep: ${(err as Error).message}`) })
      this.#server = new ControlServer(this.#handlers(), log)
      await this.#server.listen(socketPath(home))
      log(`layerd ${process.pid} serving ${socketPath(home)}, cache ${this.#cache.location}`)
    } catch (err) {
      await this.stop()
      throw err
    }
  }

  /** Unmount everything and release the node. Idempotent. */
  async stop (): Promise<void> {
    this.#stopping ??= (async () => {
      await this.#server?.close()
      await this.#mounts?.unmountAll()
      await this.#stores?.close()
      await this.#cache?.close()
      this.#db?.close()
      rmSync(socketPath(this.config.home), { force: true })
      this.#releasePidFile()
    })()
    await this.#stopping
  }

  #handlers (): Record<string, (params: any) => Promise<unknown>> {
    const mounts = this.#mounts!
    return {
      ping: async () => ({ pid: process.pid, home: this.config.home, startedAt: this.startedAt.toISOString() }),
      mount: async p => await mounts.mount(p),
      umount: async (p: { mountpoint: string }) => { await mounts.unmount(p.mountpoint); return {} },
      mounts: async () => mounts.list(),
      image: async p => await mounts.shared(p),
      blockView: async p => await this.#blockViews!.ensure(p),
      stats: async (p: { mountpoint?: string }) => p.mountpoint === undefined
        ? { cache: this.#cache!.stats(), fetch: this.#stores!.fetchTotals(), mounts: mounts.list().length }
        : { ...mounts.stats(p.mountpoint), cache: this.#cache!.stats() },
      prefetch: async (p: { mountpoint: string, wait?: boolean }) => {
        const { chunks, traced, done } = mounts.prefetch(p.mountpoint)
        return p.wait === true ? { chunks, traced, ...(await done) } : { chunks, traced, started: true }
      },
      pull: async (p: PullParams) => await this.#pull(p),
      export: async (p: ExportParams) => await this.#export(p),
      shutdown: async () => { setImmediate(() => { void this.stop().then(() => process.exit(LAYERD_EXIT.OK)) }); return {} }
    }
  }

  async #pull (p: PullParams): Promise<unknown> {
    const { store, fetcher } = this.#stores!.get(p)
    const image = await loadImage(store, p.image, { cache: this.#cache! })
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

  async #export (p: ExportParams): Promise<unknown> {
    const target: ExportTarget | undefined = p.tarFile !== undefined ? { tarFile: p.tarFile } : p.directory !== undefined ? { directory: p.directory } : undefined
    if (target === undefined) throw new UsageError('export needs a tar file or a directory')
    const { store, fetcher } = this.#stores!.get(p)
    const image = await loadImage(store, p.image, { cache: this.#cache! })
    const before = fetcher.stats.fetchedBytes
    const result = await exportImage(image, fetcher, target)
    return { manifest: image.digest, ...result, fetchedBytes: fetcher.stats.fetchedBytes - before }
  }

  #takePidFile (): void {
    const path = pidFilePath(this.config.home)
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(path, 'wx', 0o600)
        writeSync(fd, `${process.pid}\n`)
        closeSync(fd)
        return
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
        const pid = Number(readFileSync(path, 'utf8').trim())
        if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && isAlive(pid)) {
          throw new AlreadyRunningError(`layerd is already running for ${this.config.home} (pid ${pid})`)
        }
        rmSync(path, { force: true }) // stale: its process is gone
      }
    }
  }

  #releasePidFile (): void {
    const path = pidFilePath(this.config.home)
    try {
      if (Number(readFileSync(path, 'utf8').trim()) === process.pid) rmSync(path, { force: true })
    } catch {}
  }
}

function isAlive (pid: number): boolean {
  try { process.kill(pid, 0); return true } catch (err) { return (err as NodeJS.ErrnoException).code === 'EPERM' }
}
