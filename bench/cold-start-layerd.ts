/**
 * One cold layerd run of the cold-start workload (bench/cold-start.ts, and
 * the chunking probe bench/elf-chunking.ts): a fresh LAYERD_HOME (empty
 * chunk cache) on `store`, page cache dropped, the mount (over an open
 * control connection, or a `layerctl mount` process) and the workload
 * timed, then `stats --json`, umount, stop.
 *
 * Bench-only: may import anything.
 */
import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { layerdNode } from '../fixtures/layerd-harness.js'
import { connectDaemon } from '../src/daemon/client/daemon-launcher.js'
import { dropPageCaches, LAYERCTL_JS, shq, timeShell } from './bench-report.js'

export interface ColdSample {
  /** Mount (layerd) or download + decompress + untar (baseline), seconds. */
  prepareSeconds: number
  /** The mount time layerctl reports (the daemon's side of `layerctl mount`). */
  daemonMountSeconds?: number
  runSeconds: number
  totalSeconds: number
  fetchedBytes?: number
  storedBytes?: number
  imageBytes?: number
  fetches?: number
  /** stargz-store: its start until its FUSE mount is up (not in the total: layerd's daemon is also running before the clock). */
  startSeconds?: number
}

/** 'api': mount over an open control connection; 'cli': `layerctl mount`, daemon running; 'cli-start': `layerctl mount` starts the daemon. */
export type ColdMountMode = 'api' | 'cli' | 'cli-start'

export interface ColdStore { url: string, s3Endpoint?: string, env?: NodeJS.ProcessEnv }

export interface ColdRun {
  /** Directory for the run's LAYERD_HOME (node-MODE-REP under it, removed after). */
  work: string
  image: string
  /** Shell command run as `chroot MOUNT WORKLOAD`. */
  workload: string
  /** Called (not timed) after the page cache is dropped, before the mount, with the node's home. */
  beforeMount?: (home: string) => Promise<void>
  /** Called after the mount, before the workload (timed: keep it short), with the node's home. */
  afterMount?: (home: string) => Promise<void>
}

/** A run function for runInterleaved: one cold layerd mount + workload per call. */
export function coldLayerdRun (run: ColdRun, mode: ColdMountMode, store: ColdStore) {
  return async (rep: number): Promise<ColdSample> => {
    const node = layerdNode(join(run.work, `node-${mode}-${rep}`), { store: store.url, env: { ...(store.s3Endpoint === undefined ? {} : { LAYERD_S3_ENDPOINT: store.s3Endpoint }), ...store.env } })
    const mnt = join(node.home, 'mnt')
    await mkdir(mnt, { recursive: true })
    if (mode !== 'cli-start') await node.startDaemon()
    const client = mode === 'api' ? await connectDaemon({ home: node.home, autoStart: false }) : undefined
    try {
      await dropPageCaches()
      await run.beforeMount?.(node.home)
      let mount: { seconds: number, stdout: string }
      if (client !== undefined) {
        const t0 = performance.now()
        const info = await client.call('mount', { image: run.image, mountpoint: mnt, store: store.url, ...(store.s3Endpoint === undefined ? {} : { s3Endpoint: store.s3Endpoint }) })
        await run.afterMount?.(node.home)
        mount = { seconds: (performance.now() - t0) / 1000, stdout: `in ${Math.round(info.mountMs)} ms` }
      } else {
        mount = await timeShell(`exec node ${shq(LAYERCTL_JS)} mount ${run.image} ${shq(mnt)}`, { env: node.env })
        await run.afterMount?.(node.home)
      }
      const ran = await timeShell(`exec chroot ${shq(mnt)} ${run.workload}`)
      const stats = await node.layerctl('stats', mnt, '--json')
      if (stats.code !== 0) throw new Error(`stats failed: ${stats.stderr}`)
      const s = JSON.parse(stats.stdout) as { fetchedBytes: number, storedBytes: number, imageBytes: number, fetches: number }
      const umount = await node.layerctl('umount', mnt)
      if (umount.code !== 0) throw new Error(`umount failed: ${umount.stderr}`)
      const daemonMs = /in (\d+) ms/.exec(mount.stdout)
      return { prepareSeconds: mount.seconds, daemonMountSeconds: daemonMs === null ? undefined : Number(daemonMs[1]) / 1000, runSeconds: ran.seconds, totalSeconds: mount.seconds + ran.seconds, fetchedBytes: s.fetchedBytes, storedBytes: s.storedBytes, imageBytes: s.imageBytes, fetches: s.fetches }
    } finally {
      client?.close()
      await node.stopDaemon()
      await rm(node.home, { recursive: true, force: true })
    }
  }
}
