/**
 * A node's resources through a run, sampled every few seconds while the
 * node's blocks run, for the time-series plot and the "nothing grows
 * without bound" check:
 *
 * - rssBytes / fds: per daemon (dockerd, containerd; layerd, and the node
 *   agent when it runs createSandbox in-process), VmRSS and /proc/PID/fd
 * - mounts: mount points at or below the node's disk (overlay2 layers and
 *   container roots; layerd's image mounts, overlays and sandbox disks)
 * - loopDevices: loop devices whose backing file lies on the node's disk
 *   (layerd's per-sandbox ext4 disks; docker uses none)
 *
 * The host's own mount table is shared with other work on the machine, so
 * only the node's part of it is counted.
 *
 * Bench-only: may import node built-ins.
 */
import { readdir, readFile } from 'node:fs/promises'

const SAMPLE_EVERY_MS = 5000

export interface SeriesSample {
  /** Seconds on the node's clock (its blocks only). */
  seconds: number
  /** Containers deployed on the node when sampled. */
  done: number
  rssBytes: Record<string, number>
  fds: Record<string, number>
  mounts: number
  loopDevices: number
}

async function rssOf (pid: number): Promise<number> {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))
    return m === null ? 0 : Number(m[1]) * 1024
  } catch { return 0 }
}

async function fdsOf (pid: number): Promise<number> {
  try { return (await readdir(`/proc/${pid}/fd`)).length } catch { return 0 }
}

/** Mount points at or below `dir` in this process's mount table (octal escapes decoded). Async. */
export async function mountsBelow (dir: string): Promise<number> {
  const text = await readFile('/proc/self/mountinfo', 'utf8')
  let n = 0
  for (const line of text.split('\n')) {
    const mp = line.split(' ')[4]
    if (mp === undefined) continue
    const path = mp.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))
    if (path === dir || path.startsWith(dir + '/')) n++
  }
  return n
}

/** Loop devices whose backing file is at or below `dir`. Async. */
export async function loopDevicesBelow (dir: string): Promise<number> {
  let n = 0
  for (const dev of await readdir('/sys/block').catch(() => [] as string[])) {
    if (!dev.startsWith('loop')) continue
    const backing = await readFile(`/sys/block/${dev}/loop/backing_file`, 'utf8').catch(() => '')
    const b = backing.trim()
    if (b === dir || b.startsWith(dir + '/')) n++
  }
  return n
}

export class NodeSeries {
  readonly samples: SeriesSample[] = []
  readonly #dir: string
  readonly #pids: () => Record<string, number>

  /** `dir`: the node's disk mountpoint; `pids`: the daemons to sample, by name. */
  constructor (dir: string, pids: () => Record<string, number>) {
    this.#dir = dir
    this.#pids = pids
  }

  /** Take one sample now. Async; never rejects (a gone process reads 0). */
  async sample (at: { done: number, seconds: number }): Promise<void> {
    const rssBytes: Record<string, number> = {}
    const fds: Record<string, number> = {}
    for (const [name, pid] of Object.entries(this.#pids())) {
      rssBytes[name] = await rssOf(pid)
      fds[name] = await fdsOf(pid)
    }
    const mounts = await mountsBelow(this.#dir).catch(() => -1)
    const loopDevices = await loopDevicesBelow(this.#dir)
    this.samples.push({ seconds: at.seconds, done: at.done, rssBytes, fds, mounts, loopDevices })
  }

  /**
   * Sample now and every SAMPLE_EVERY_MS until the returned stop() is
   * called, which takes a last sample. `at` gives the node's clock and count.
   */
  sampleEvery (at: () => { done: number, seconds: number }): () => Promise<void> {
    let pending: Promise<void> = this.sample(at())
    const timer = setInterval(() => { pending = pending.then(async () => { await this.sample(at()) }) }, SAMPLE_EVERY_MS)
    return async () => {
      clearInterval(timer)
      await pending
      await this.sample(at())
    }
  }
}
