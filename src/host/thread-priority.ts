/**
 * Scheduling priority of every thread of this process. Linux keeps a nice
 * value per thread (setpriority(PRIO_PROCESS) on a thread id changes that
 * thread only, and a new thread starts with its creator's), so setting a
 * process's priority means setting each of its threads'. Used by layerd to
 * go back to its serving priority when it takes over: the holder starts a
 * daemon that only prepares (a warm standby, a planned restart's new one)
 * niced, so its loading does not slow the reads of the one serving.
 *
 * May import: node built-ins.
 */
import { readdirSync } from 'node:fs'
import { setPriority } from 'node:os'

/**
 * Give every thread of this process the nice value `nice`. Sync. Returns
 * how many threads were changed; throws the first error (EACCES when
 * lowering the value needs CAP_SYS_NICE); threads that ended meanwhile are skipped.
 */
export function setProcessNice (nice: number): number {
  let changed = 0
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      setPriority(Number(tid), nice)
      changed++
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ESRCH' || (err as { info?: { code?: string } }).info?.code === 'ESRCH') continue
      throw err
    }
  }
  return changed
}
