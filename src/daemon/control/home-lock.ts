/**
 * HomeLock: exactly one layerd per home, whatever the races. The daemon
 * holds an exclusive flock(2) on `<home>/layerd.lock` for its whole life;
 * the kernel drops it when the process ends, however it ends (SIGKILL, a
 * crash), so a lock is never stale and never needs cleaning. A pid-file
 * check cannot give this: two starts can both read "no live pid" and both
 * write theirs.
 *
 * The pid file (`<home>/layerd.pid`) still names the daemon, for people and
 * for `layerctl`; it is written by the lock holder only (replaced whole, by
 * rename, so a reader never sees it half-written) and removed by it on a
 * clean stop. Nobody else removes or rewrites it.
 *
 * The lock fd is opened close-on-exec (as Node opens every fd), so the
 * sandboxes and tools layerd starts never inherit the lock.
 *
 * May import: src/errors.ts, src/native.ts, this folder.
 */
import { closeSync, openSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { AlreadyRunningError, InternalError } from '../../errors.js'
import { flock, LOCK_EX, LOCK_NB, LOCK_UN } from '../../native.js'
import { pidFilePath, readDaemonPid } from '../client/control-protocol.js'

export const LOCK_FILE_NAME = 'layerd.lock'
/** A waiting start polls this often: a planned restart's readers stall from the old daemon's exit until the new one has the lock (issue 19). */
const LOCK_POLL_MS = 2

export const lockFilePath = (home: string): string => join(home, LOCK_FILE_NAME)

export { AlreadyRunningError }

export class HomeLock {
  readonly home: string
  #fd: number | undefined

  private constructor (home: string, fd: number) {
    this.home = home
    this.#fd = fd
  }

  /**
   * Take the home's lock, waiting up to `waitMs` (default 0: one attempt)
   * for a daemon that is handing over or stopping. Async. Throws
   * AlreadyRunningError naming the holder's pid (from the pid file) when it
   * stays taken; errno errors when the lock file cannot be opened.
   */
  static async acquire (home: string, waitMs = 0): Promise<HomeLock> {
    const fd = openSync(lockFilePath(home), 'a', 0o600)
    try {
      const deadline = Date.now() + waitMs
      while (!flock(fd, LOCK_EX | LOCK_NB)) {
        if (Date.now() >= deadline) {
          const pid = readDaemonPid(home)
          throw new AlreadyRunningError(`layerd is already running for ${home}${pid === undefined ? ' (it is starting: no pid file yet)' : ` (pid ${pid})`}`)
        }
        await new Promise(resolve => setTimeout(resolve, LOCK_POLL_MS))
      }
    } catch (err) {
      closeSync(fd)
      throw err
    }
    return new HomeLock(home, fd)
  }

  /** Whether this object still holds the lock. */
  get held (): boolean { return this.#fd !== undefined }

  /** Record this process as the home's daemon (`<home>/layerd.pid`, replaced whole). Sync; only while held. */
  writePidFile (): void {
    if (this.#fd === undefined) throw new InternalError(`cannot write the pid file of ${this.home}: its lock is not held`)
    const path = pidFilePath(this.home)
    const tmp = `${path}.${process.pid}.tmp`
    writeFileSync(tmp, `${process.pid}\n`, { mode: 0o644 })
    renameSync(tmp, path)
  }

  /** Remove the pid file if it names this process, then drop the lock. Sync; idempotent; never throws. */
  release (): void {
    const fd = this.#fd
    if (fd === undefined) return
    this.#fd = undefined
    try { if (readDaemonPid(this.home) === process.pid) rmSync(pidFilePath(this.home), { force: true }) } catch {}
    try { flock(fd, LOCK_UN) } catch {}
    try { closeSync(fd) } catch {}
  }
}
