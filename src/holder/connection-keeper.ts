/**
 * HeldConnections: the daemon's ConnectionKeeper (src/fs/kernel-fuse-keeper.ts)
 * over an FdStore (the holder, or systemd) and a record file,
 * `<home>/connections.json`, that says what each kept fd is (mountpoint,
 * INIT negotiation, options, table digest).
 *
 * Consistency: a record is written before its fd is handed to the store, and
 * removed after the fd is dropped, so a kept fd always has its record. At
 * start, fds without a record are closed (their connections end) and
 * records without an fd are dropped (their mounts died with the daemon;
 * the mount manager cleans those mountpoints). A holder that dies is
 * replaced at once: this daemon starts a new one (rescue-holder.ts) and hands
 * it the fd of every connection it serves; only when that fails does it
 * serve on unprotected, logged, and `storeGone` says so. The file is written by
 * rename without fsync: it only has to survive the daemon's death, and a
 * reboot ends every FUSE connection anyway.
 *
 * May import: src/errors.ts, src/fs/kernel-fuse-keeper.ts (types), ./*.
 */
import { closeSync, readFileSync, readlinkSync, renameSync, writeFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { describeError } from '../errors.js'
import type { ConnectionKeeper, ConnectionRecord, KeptConnection } from '../fs/kernel-fuse-keeper.js'
import { fdStoreFromEnv, type FdStore } from './fd-stores.js'
import type { LogLine } from '../log-line.js'
import { HOLDER_RESCUE_ENV, startRescueHolder } from './rescue-holder.js'

export const CONNECTIONS_FILE = 'connections.json'
const FILE_VERSION = 1

interface ConnectionsFile { version: number, connections: Record<string, ConnectionRecord> }

/** The fd name of the connection at `mountpoint` (systemd's FDNAME rules). */
export function connectionName (mountpoint: string): string {
  return 'fuse-' + createHash('sha256').update(mountpoint).digest('hex').slice(0, 40)
}

export class HeldConnections implements ConnectionKeeper {
  store: FdStore
  readonly #file: string
  readonly #log: LogLine
  readonly #records: Map<string, ConnectionRecord>
  /** Kept by an earlier daemon, not yet taken: by mountpoint. */
  readonly #available = new Map<string, KeptConnection>()
  /** Mountpoints an earlier daemon recorded whose connection is gone (nothing kept its fd). */
  readonly lost: string[] = []
  /** This process's fd of each connection it serves, by name: what a new holder is handed when the old one dies. */
  readonly #served = new Map<string, number>()
  #storeFailed = false
  #storeGone = false

  /**
   * The keeper over `store`, with what an earlier daemon kept. Call with the
   * home's lock held (no other daemon changes the store). Sync; never
   * throws (a store that cannot list is logged, and nothing is taken over).
   */
  static open (home: string, store: FdStore, log: LogLine): HeldConnections {
    return new HeldConnections(store, join(home, CONNECTIONS_FILE), log)
  }

  /**
   * The fd store this process was started under (fd-stores.ts), or
   * undefined (none, or a malformed one: logged). Sync; never throws.
   */
  static storeFromEnv (log: LogLine): FdStore | undefined {
    try { return fdStoreFromEnv() } catch (err) { log(`FUSE connections will not survive this daemon: ${describeError(err)}`, 'warn'); return undefined }
  }

  constructor (store: FdStore, file: string, log: LogLine) {
    this.store = store
    this.#file = file
    this.#log = log
    this.#records = readRecords(file, log)
    this.#watchGone(store)
    let held = new Map<string, number>()
    try { held = store.list() } catch (err) { this.#storeDown(err) }
    for (const [name, fd] of held) {
      const record = this.#records.get(name)
      if (record !== undefined) { this.#available.set(record.mountpoint, { fd, record }); continue }
      closeSync(fd)
      try { store.drop(name) } catch (err) { this.#storeDown(err) }
    }
    for (const [name, record] of this.#records) {
      if (held.has(name)) continue
      this.#records.delete(name)
      this.lost.push(record.mountpoint)
    }
    this.#save()
  }

  /** Whether the store has gone for good (FdStore.onGone: the holder died): nothing keeps this daemon's connections. */
  get storeGone (): boolean { return this.#storeGone }

  /** How many connections an earlier daemon kept that are still to be taken. */
  get availableCount (): number { return this.#available.size }

  /** Whether an earlier daemon kept a connection for `mountpoint` that is still to be taken. Sync. */
  has (mountpoint: string): boolean { return this.#available.has(mountpoint) }

  take (mountpoint: string): KeptConnection | undefined {
    const kept = this.#available.get(mountpoint)
    this.#available.delete(mountpoint)
    if (kept !== undefined) this.#served.set(connectionName(mountpoint), kept.fd) // the server owns it from here, or discard() closes it
    return kept
  }

  keep (fd: number, record: ConnectionRecord): void {
    const name = connectionName(record.mountpoint)
    this.#records.set(name, record)
    this.#served.set(name, fd)
    this.#save()
    this.store.put(name, fd) // throws: the caller logs that this mount will not survive a crash
  }

  forget (mountpoint: string): void {
    const name = connectionName(mountpoint)
    this.#served.delete(name)
    if (!this.#records.has(name)) return
    try { this.store.drop(name) } catch (err) { this.#storeDown(err) }
    this.#records.delete(name)
    this.#save()
  }

  discard (kept: KeptConnection): void {
    try { closeSync(kept.fd) } catch {}
    this.forget(kept.record.mountpoint)
  }

  /**
   * After recovery: end every kept connection nobody took (its image is no
   * longer wanted), so its mountpoint can be cleaned. Returns those
   * mountpoints, and the lost ones. Sync; never throws.
   */
  releaseUntaken (): string[] {
    const released = [...this.lost]
    for (const kept of this.#available.values()) {
      this.discard(kept)
      released.push(kept.record.mountpoint)
    }
    this.#available.clear()
    this.lost.length = 0
    return released
  }

  /** Tell the store this daemon serves. Sync; never throws. */
  ready (): void {
    try { this.store.ready() } catch (err) { this.#storeDown(err) }
  }

  /** Watch `store` for going (the holder died): a holder's is replaced by a new holder, handed every served connection. */
  #watchGone (store: FdStore): void {
    try {
      store.onGone(why => {
        if (store !== this.store) return
        if (store.kind === 'holder' && process.env[HOLDER_RESCUE_ENV] !== '0' && this.#rescue(describeError(why))) return
        this.#storeGone = true
        this.#log(`${describeError(why)}: FUSE connections will not survive this daemon`, 'warn')
      })
    } catch (err) { this.#storeDown(err) }
  }

  /**
   * Start a new holder and hand it this daemon's connections (queued in its
   * socket, so the holder's boot does not hold this daemon up). Sync; false
   * (logged) when no holder could be started.
   */
  #rescue (why: string): boolean {
    let store
    try {
      store = startRescueHolder(this.#log)
      let handed = 0
      for (const [name, fd] of this.#served) {
        // A connection the kernel ended (an unmount from outside) may have closed its fd under an unchanged record: never hand over a reused number.
        if (!isFuseFd(fd)) { this.#log(`fd ${fd} of ${name} is no longer /dev/fuse: not handed to the new holder`); continue }
        store.handOver(name, fd)
        handed++
      }
      store.ready()
      this.#log(`${why}: ${handed} FUSE connection(s) handed to a new holder`)
    } catch (err) {
      this.#log(`${why}, and no new holder could take its place: ${describeError(err)}`, 'warn')
      return false
    }
    this.store = store
    this.#storeFailed = false
    // Not the new holder's child: it learns this daemon's exit code from here (a SIGKILL sends nothing: a crash).
    process.once('exit', code => { if (this.store === store) store.exiting(code) })
    this.#watchGone(store)
    return true
  }

  #storeDown (err: unknown): void {
    if (this.#storeFailed) return
    this.#storeFailed = true
    this.#log(`the ${this.store.kind} fd store failed: FUSE connections may not survive this daemon: ${describeError(err)}`, 'warn')
  }

  #save (): void {
    const body: ConnectionsFile = { version: FILE_VERSION, connections: Object.fromEntries(this.#records) }
    const tmp = `${this.#file}.tmp`
    try {
      writeFileSync(tmp, JSON.stringify(body) + '\n', { mode: 0o600 })
      renameSync(tmp, this.#file)
    } catch (err) {
      this.#log(`cannot write ${this.#file}: a restarted daemon may not take over its mounts: ${describeError(err)}`, 'warn')
    }
  }
}

/** Whether `fd` is open on /dev/fuse in this process. Sync. */
function isFuseFd (fd: number): boolean {
  try { return readlinkSync(`/proc/self/fd/${fd}`) === '/dev/fuse' } catch { return false }
}

/**
 * The records in `<home>/connections.json` as they are now, without taking
 * anything (a planned restart's new daemon reads them while the old one
 * serves: src/daemon/mounts/prepared-takeovers.ts). Sync; never throws.
 */
export function readConnectionRecords (home: string, log: LogLine): ConnectionRecord[] {
  return [...readRecords(join(home, CONNECTIONS_FILE), log).values()]
}

/** The records of `file`; none (logged) when it is missing, unreadable or of another version. */
function readRecords (file: string, log: LogLine): Map<string, ConnectionRecord> {
  let text: string
  try { text = readFileSync(file, 'utf8') } catch { return new Map() }
  try {
    const body = JSON.parse(text) as ConnectionsFile
    if (body.version !== FILE_VERSION || typeof body.connections !== 'object' || body.connections === null) throw new Error(`version ${String(body.version)}, expected ${FILE_VERSION}`)
    const out = new Map<string, ConnectionRecord>()
    for (const [name, r] of Object.entries(body.connections)) {
      if (typeof r?.mountpoint === 'string' && typeof r.tableDigest === 'string' && connectionName(r.mountpoint) === name) out.set(name, r)
    }
    return out
  } catch (err) {
    log(`ignoring ${file}: ${describeError(err)}`, 'warn')
    return new Map()
  }
}
