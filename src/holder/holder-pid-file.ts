/**
 * `<home>/holder.pid`: which holder runs for a home. Taken with O_EXCL, so
 * of two holders started at once one refuses; a file left by a process that
 * is gone is stale and taken over.
 *
 * May import: src/errors.ts, ./fd-store-protocol.ts, node built-ins.
 */
import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { HolderError } from '../errors.js'
import { HOLDER_PID_FILE } from './fd-store-protocol.js'

/** The pid in `<home>/holder.pid` if that process is alive. Sync. */
export function holderPidIn (home: string): number | undefined {
  let pid: number
  try { pid = Number(readFileSync(join(home, HOLDER_PID_FILE), 'utf8').trim()) } catch { return undefined }
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined
  // A killed holder whose parent does not reap it (PID 1 here is no init) stays a zombie: dead, whatever kill(0) says.
  if (isZombie(pid)) return undefined
  try { process.kill(pid, 0); return pid } catch (err) { return (err as NodeJS.ErrnoException).code === 'EPERM' ? pid : undefined }
}

/** Whether `pid` has exited and waits to be reaped (/proc/PID/stat state Z; the comm field may hold spaces). Sync. */
function isZombie (pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z'
  } catch { return false }
}

/** Write this process's pid to `<home>/holder.pid`. Sync. Throws HolderError when another live holder's pid is there. */
export function takeHolderPidFile (home: string): void {
  const path = join(home, HOLDER_PID_FILE)
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600)
      writeSync(fd, `${process.pid}\n`)
      closeSync(fd)
      return
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      const pid = holderPidIn(home)
      if (pid !== undefined && pid !== process.pid) throw new HolderError(`a layerd holder already runs for ${home} (pid ${pid})`)
      rmSync(path, { force: true }) // stale: its process is gone
    }
  }
}

/** Remove `<home>/holder.pid` if it names this process. Sync. */
export function releaseHolderPidFile (home: string): void {
  if (holderPidIn(home) === process.pid) rmSync(join(home, HOLDER_PID_FILE), { force: true })
}
