/**
 * Memory pressure as the kernel reports it, for layerd's proactive reclaim
 * (src/daemon/memory/memory-reclaimer.ts): how much memory is in use where this
 * process is charged, and how much time tasks stall on memory (PSI).
 *
 * What "in use" is, in order of preference:
 *   1. this process's memory cgroup, when it is not the root: cgroup v2
 *      `memory.current`, or v1 `memory.usage_in_bytes` (both count the page
 *      cache charged to the group: the quantity reclaim can lower);
 *   2. the node: MemTotal − MemFree − (Buffers) from /proc/meminfo, page
 *      cache included. MemTotal − MemAvailable would count most page cache
 *      as free, so dropping it would not show.
 * PSI is `/proc/pressure/memory`'s `some avg10` (percent of the last 10 s
 * some task waited on memory); undefined when the kernel has no PSI.
 *
 * May import: node built-ins.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

export interface MemoryReading {
  /** Bytes in use where this process is charged (see above). */
  usedBytes: number
  /** The limit there: the cgroup's, or MemTotal. */
  limitBytes: number
  /** PSI memory `some avg10`, percent; undefined without PSI. */
  psiSomeAvg10: number | undefined
}

export interface MemoryGauge {
  /** What `usedBytes` measures, for logs and `stats` ('cgroup v1 /sys/fs/cgroup/memory/x', 'node'). */
  readonly source: string
  /** One reading. Sync, cheap (three small /proc or /sys reads); never throws. */
  read: () => MemoryReading
}

const CGROUP_ROOT = '/sys/fs/cgroup'
/** v1's "no limit" is a page-rounded LONG_MAX. */
const V1_UNLIMITED = 2 ** 62

function readText (path: string): string | undefined {
  try { return readFileSync(path, 'utf8') } catch { return undefined }
}

/** /proc/meminfo's fields in bytes. */
export function readMeminfo (text = readText('/proc/meminfo') ?? ''): Map<string, number> {
  const fields = new Map<string, number>()
  for (const line of text.split('\n')) {
    const m = /^(\w+(?:\(\w+\))?):\s+(\d+)(?: kB)?$/.exec(line)
    if (m !== null) fields.set(m[1]!, Number(m[2]) * (line.endsWith('kB') ? 1024 : 1))
  }
  return fields
}

/** PSI memory `some avg10` (percent), or undefined without PSI. */
export function readMemoryPsi (text = readText('/proc/pressure/memory')): number | undefined {
  const m = text === undefined ? null : /^some avg10=([\d.]+)/m.exec(text)
  return m === null ? undefined : Number(m[1])
}

/** This process's memory cgroup directory (v2 unified or v1 memory controller), when it is not the root. */
export function ownMemoryCgroup (cgroupFile = readText('/proc/self/cgroup') ?? ''): { version: 1 | 2, dir: string } | undefined {
  for (const line of cgroupFile.split('\n')) {
    const [, controllers, path] = line.split(':')
    if (path === undefined || path === '/') continue
    if (controllers?.split(',').includes('memory') === true) {
      const dir = join(CGROUP_ROOT, 'memory', path)
      if (readText(join(dir, 'memory.usage_in_bytes')) !== undefined) return { version: 1, dir }
    }
  }
  for (const line of cgroupFile.split('\n')) {
    const [hierarchy, controllers, path] = line.split(':')
    if (hierarchy !== '0' || controllers !== '' || path === undefined || path === '/') continue
    const dir = join(CGROUP_ROOT, path)
    if (readText(join(dir, 'memory.current')) !== undefined) return { version: 2, dir }
  }
  return undefined
}

function nodeReading (): Omit<MemoryReading, 'psiSomeAvg10'> {
  const m = readMeminfo()
  const total = m.get('MemTotal') ?? 0
  return { usedBytes: total - (m.get('MemFree') ?? 0) - (m.get('Buffers') ?? 0), limitBytes: total }
}

/** The gauge for this process (its cgroup when it has one, else the node). Sync. */
export function memoryGauge (): MemoryGauge {
  const cgroup = ownMemoryCgroup()
  const nodeTotal = (): number => readMeminfo().get('MemTotal') ?? 0
  if (cgroup === undefined) {
    return { source: 'node', read: () => ({ ...nodeReading(), psiSomeAvg10: readMemoryPsi() }) }
  }
  const [usedFile, limitFile] = cgroup.version === 1 ? ['memory.usage_in_bytes', 'memory.limit_in_bytes'] : ['memory.current', 'memory.max']
  return {
    source: `cgroup v${cgroup.version} ${cgroup.dir}`,
    read: () => {
      const used = Number(readText(join(cgroup.dir, usedFile)) ?? NaN)
      if (!Number.isFinite(used)) return { ...nodeReading(), psiSomeAvg10: readMemoryPsi() } // the group went away
      const limitText = readText(join(cgroup.dir, limitFile))?.trim()
      const limit = limitText === undefined || limitText === 'max' || Number(limitText) >= V1_UNLIMITED ? nodeTotal() : Number(limitText)
      return { usedBytes: used, limitBytes: Math.min(limit, nodeTotal()), psiSomeAvg10: readMemoryPsi() }
    }
  }
}
