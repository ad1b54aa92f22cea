/**
 * Where the daemon's memory is, from inside: the kernel's view
 * (/proc/self/status and smaps_rollup: resident anonymous and file-backed
 * pages, the lmdb map among the latter), V8's (heap, external memory,
 * ArrayBuffers) and glibc malloc's (mallinfo2: arena bytes, free bytes
 * inside them). `layerctl stats --json` returns it as `memory`, and
 * bench/daemon-memory.ts reads it.
 *
 * May import: src/native.ts, ./control-protocol.ts (types), node built-ins.
 */
import { readFileSync } from 'node:fs'
import { nativeMemory, type MallocStats } from '../../native.js'
import type { DaemonMemoryResult } from '../client/control-protocol.js'

/** The wire type (control-protocol.ts) without the settler's part. */
export type DaemonMemory = Omit<DaemonMemoryResult, 'settle'>

const KIB = 1024

/** A `Name:  N kB` line of a /proc file, in bytes; NaN when absent. */
function kbField (text: string, name: string): number {
  const m = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)
  return m === null ? NaN : Number(m[1]) * KIB
}

/** The daemon's memory now. Sync; never throws (fields it cannot read are NaN or absent). */
export function readDaemonMemory (): DaemonMemory {
  let status = ''
  let rollup = ''
  try { status = readFileSync('/proc/self/status', 'utf8') } catch {}
  try { rollup = readFileSync('/proc/self/smaps_rollup', 'utf8') } catch {}
  const u = process.memoryUsage()
  let malloc: MallocStats | undefined
  try { malloc = nativeMemory().mallocStats() } catch {}
  return {
    rssBytes: kbField(status, 'VmRSS'),
    rssAnonBytes: kbField(status, 'RssAnon'),
    rssFileBytes: kbField(status, 'RssFile'),
    peakRssBytes: kbField(status, 'VmHWM'),
    pssBytes: kbField(rollup, 'Pss'),
    v8: { heapTotalBytes: u.heapTotal, heapUsedBytes: u.heapUsed, externalBytes: u.external, arrayBufferBytes: u.arrayBuffers },
    ...(malloc === undefined ? {} : { malloc })
  }
}
