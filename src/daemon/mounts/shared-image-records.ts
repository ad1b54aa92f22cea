/**
 * The images a daemon mounted for sandboxes (MountManager.shared()), in
 * `<home>/shared-images.json`, so a daemon started after a crash or for an
 * upgrade serves the same images at the same paths: it takes their FUSE
 * connections over where they were kept (src/holder/), and mounts them
 * again where they were not. Plain `layerctl mount`s are in the node
 * database's `mounts` table instead.
 *
 * Written by rename, without fsync: it only has to survive the daemon's
 * death; after a reboot, restoring the images again is all it is used for.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs'
import { describeError } from '../../errors.js'
import type { LogLine } from '../../log-line.js'

export interface SharedImageRecord {
  /** The overlay (or single mount) sandboxes use. */
  mountpoint: string
  /** The name it was asked for, and the manifest digest it resolved to. */
  image: string
  manifest: string
  store: string
  s3Endpoint?: string
  /** A stack's two FUSE mounts below the overlay (image-stacks.ts); absent for a single mount. */
  topPath?: string
  basePath?: string
}

const VERSION = 1

export class SharedImageRecords {
  readonly #file: string
  readonly #log: LogLine
  readonly #records = new Map<string, SharedImageRecord>()

  /** Reads `file`; a missing file is empty, an unreadable one is logged and ignored. Sync. */
  constructor (file: string, log: LogLine) {
    this.#file = file
    this.#log = log
    let text: string | undefined
    try { text = readFileSync(file, 'utf8') } catch {}
    if (text === undefined) return
    try {
      const body = JSON.parse(text) as { version?: number, images?: SharedImageRecord[] }
      if (body.version !== VERSION || !Array.isArray(body.images)) throw new Error(`version ${String(body.version)}, expected ${VERSION}`)
      for (const r of body.images) if (typeof r?.mountpoint === 'string' && typeof r.manifest === 'string' && typeof r.store === 'string') this.#records.set(r.mountpoint, r)
    } catch (err) {
      log(`ignoring ${file}: ${describeError(err)}`, 'warn')
    }
  }

  list (): SharedImageRecord[] { return [...this.#records.values()] }

  get (mountpoint: string): SharedImageRecord | undefined { return this.#records.get(mountpoint) }

  /** Record (or replace) one. Sync; a failed write is logged. */
  put (record: SharedImageRecord): void {
    this.#records.set(record.mountpoint, record)
    this.#save()
  }

  /** Forget the one at `mountpoint`. Sync; a failed write is logged. */
  delete (mountpoint: string): void {
    if (this.#records.delete(mountpoint)) this.#save()
  }

  #save (): void {
    const tmp = `${this.#file}.tmp`
    try {
      writeFileSync(tmp, JSON.stringify({ version: VERSION, images: this.list() }) + '\n', { mode: 0o600 })
      renameSync(tmp, this.#file)
    } catch (err) {
      this.#log(`cannot write ${this.#file}: a restarted daemon may not serve its images at once: ${describeError(err)}`, 'warn')
    }
  }
}
