/**
 * A simulated node's local disk: a sparse file formatted ext4 and mounted
 * through a loop device of its own, holding everything the node keeps
 * (docker's data root, layerd's home: cache, state, sandbox disks).
 *
 * "Bytes written to local disk" is the loop device's own count of sectors
 * written (/sys/block/loopN/stat, field 7, 512-byte units) between two
 * points, each after syncfs(2) of the filesystem. It counts what reached
 * the node's block device: file data, metadata, the journal, and the
 * sandboxes' own loop-mounted disks as far as their writes reached this
 * filesystem. Pages written and deleted before writeback never reach a
 * disk and are not counted, exactly as on a real node. Nothing else on the
 * machine writes to this device, so concurrent work elsewhere does not
 * leak into the figure (a host-wide /proc/diskstats delta would).
 *
 * The filesystem is made with its inode tables and journal initialised at
 * mkfs time (lazy_itable_init=0), so no background initialisation writes
 * into a measurement.
 *
 * Bench-only: may import src/host/mount-table.ts, fixtures/run-command.ts, node built-ins.
 */
import { mkdir, readFile, rm, statfs } from 'node:fs/promises'
import { basename, join } from 'node:path'
import { runCommand } from '../../fixtures/run-command.js'
import { unmountAllUnder } from '../../src/host/mount-table.js'

const SECTOR_BYTES = 512

export interface DiskFigures {
  /** Sectors written to the device since the baseline, in bytes. */
  writtenBytes: number
  /** Filesystem space in use now minus at the baseline (what stays on the node). */
  footprintBytes: number
}

export class NodeDisk {
  readonly mountpoint: string
  readonly image: string
  readonly device: string
  #baseline = { sectors: 0, used: 0 }

  private constructor (mountpoint: string, image: string, device: string) {
    this.mountpoint = mountpoint
    this.image = image
    this.device = device
  }

  /**
   * Make and mount a fresh disk of `sizeBytes` (sparse) as `<dir>/disk`,
   * its image at `<dir>/disk.img`. Async; rejects if mkfs or mount fails
   * (not root, no loop devices). Takes the baseline.
   */
  static async create (dir: string, sizeBytes: number): Promise<NodeDisk> {
    await mkdir(dir, { recursive: true })
    const image = join(dir, 'disk.img')
    const mountpoint = join(dir, 'disk')
    await mkdir(mountpoint, { recursive: true })
    await runCommand('truncate', ['-s', String(sizeBytes), image])
    await runCommand('mkfs.ext4', ['-q', '-F', '-E', 'lazy_itable_init=0,lazy_journal_init=0,nodiscard', '-i', '65536', image])
    await runCommand('mount', ['-o', 'loop,noatime', image, mountpoint])
    const source = (await runCommand('findmnt', ['-n', '-o', 'SOURCE', '--mountpoint', mountpoint])).trim()
    if (!/^\/dev\/loop\d+$/.test(source)) throw new Error(`${mountpoint}: expected a loop device, got ${JSON.stringify(source)}`)
    const disk = new NodeDisk(mountpoint, image, basename(source))
    await disk.markBaseline()
    return disk
  }

  /** syncfs, then remember the sector count and space used as zero. Async. */
  async markBaseline (): Promise<void> {
    await this.#sync()
    this.#baseline = { sectors: await this.#sectorsWritten(), used: await this.#usedBytes() }
  }

  /** syncfs, then the figures since the baseline. Async. */
  async figures (): Promise<DiskFigures> {
    await this.#sync()
    return {
      writtenBytes: (await this.#sectorsWritten() - this.#baseline.sectors) * SECTOR_BYTES,
      footprintBytes: await this.#usedBytes() - this.#baseline.used
    }
  }

  /** Unmount everything below and the disk itself, and delete the image. Idempotent. Async. */
  async destroy (): Promise<void> {
    await unmountAllUnder(this.mountpoint)
    await rm(this.image, { force: true })
  }

  async #sync (): Promise<void> {
    await runCommand('sync', ['-f', this.mountpoint])
  }

  async #sectorsWritten (): Promise<number> {
    const fields = (await readFile(`/sys/block/${this.device}/stat`, 'utf8')).trim().split(/\s+/)
    return Number(fields[6])
  }

  async #usedBytes (): Promise<number> {
    const s = await statfs(this.mountpoint)
    return (s.blocks - s.bfree) * s.bsize
  }
}
