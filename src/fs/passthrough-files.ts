/**
 * PassthroughFiles: which files of one kernel-backed mount the kernel reads
 * itself (FUSE passthrough, native/fuse_passthrough.h), and the local
 * copies they read from (HotFiles: src/cache/hot-file-store.ts).
 *
 * - At mount, every regular file whose copy the node already holds gets it
 *   as its backing file: its opens then read (and mmap) the copy in the
 *   kernel, and layerd sees no READ for it.
 * - A file read through FUSE whose chunks are all in the node cache is
 *   copied out in the background (one at a time per mount), then attached.
 *   Only cached chunks are copied, so passthrough never fetches a byte
 *   the reads did not: a file partly read stays on the FUSE path.
 * - Copies are content-addressed (fileKey), so one copy serves every node
 *   with the same content, in every mount.
 * - A removed copy (quota eviction) is retired: open files keep reading it,
 *   new opens go through FUSE again once none is open.
 * - Backing ids belong to the FUSE connection, which the holder keeps across
 *   a daemon restart; `ids` saves them, so a daemon that takes the
 *   connection over offers the same ids (a second backing file for an inode
 *   still open would fail its opens).
 *
 * May import: src/errors.ts, src/format/, ./*, node built-ins.
 */
import { createHash } from 'node:crypto'
import { closeSync, write } from 'node:fs'
import { promisify } from 'node:util'
import { describeError } from '../errors.js'
import type { MergedInode } from '../format/merge.js'
import { resolveChunk, type LayerToc } from '../format/toc.js'
import type { FileReader } from './file-reader.js'
import type { PassthroughBackings } from './kernel-fuse.js'

/** The local copies (implemented by src/cache/hot-file-store.ts). */
export interface HotFiles {
  has: (key: string) => boolean
  /** A read-only fd of the copy (the caller closes it), or undefined. Sync. */
  openRead: (key: string) => number | undefined
  /** Write a copy with `fill(fd)`; false when the quota has no room. Async. */
  put: (key: string, size: number, fill: (fd: number) => Promise<void>) => Promise<boolean>
  /** Called with each key removed; returns the unsubscribe. */
  onRemoved: (listener: (key: string) => void) => () => void
}

/** Where a mount's backing ids are saved for the daemon that takes its connection over. */
export interface BackingIdRecord {
  /** The ids saved by the daemon that served this connection before (node id → backing id). */
  load: () => ReadonlyMap<number, number>
  save: (ids: ReadonlyMap<number, number>) => void
}

export interface PassthroughStats { backed: number, copied: number, copyFailures: number }

/** How long after a READ a file is looked at (its read has been answered by then). */
const SETTLE_MS = 50
const COPY_BLOCK_BYTES = 1024 * 1024

const writeAt = promisify(write)

/**
 * The content key of a regular file: sha256 over its size and its spans
 * (chunk digest, offset, length). Chunks are content-addressed and verified,
 * so the key fixes the bytes. Sync.
 */
export function fileKey (inode: MergedInode, tocs: readonly LayerToc[]): string {
  const h = createHash('sha256').update(`${inode.entry.size}\n`)
  for (const span of inode.entry.spans ?? []) {
    h.update(`${resolveChunk(tocs[inode.layer]!, span.chunk).digest} ${span.offset} ${span.length}\n`)
  }
  return h.digest('hex')
}

export class PassthroughFiles {
  readonly #backings: PassthroughBackings
  readonly #nodes: ReadonlyArray<MergedInode | undefined>
  readonly #tocs: readonly LayerToc[]
  readonly #files: FileReader
  readonly #store: HotFiles
  readonly #log: (line: string) => void
  readonly #ids: BackingIdRecord | undefined
  /** Content key → the node ids with that content; key by node id. */
  readonly #byKey = new Map<string, number[]>()
  readonly #keyOf = new Map<number, string>()
  /** Node id → backing id, for the nodes with a backing file. */
  readonly #backed = new Map<number, number>()
  readonly #candidates = new Set<number>()
  readonly #stats = { copied: 0, copyFailures: 0 }
  #timer: NodeJS.Timeout | undefined
  #copying = false
  #closed = false
  readonly #unsubscribe: () => void

  constructor (target: { backings: PassthroughBackings, nodes: ReadonlyArray<MergedInode | undefined> }, tocs: readonly LayerToc[], files: FileReader,
    store: HotFiles, log: (line: string) => void, ids?: BackingIdRecord) {
    this.#backings = target.backings
    this.#nodes = target.nodes
    this.#tocs = tocs
    this.#files = files
    this.#store = store
    this.#log = log
    this.#ids = ids
    this.#unsubscribe = store.onRemoved(key => { this.#retire(key) })
  }

  /**
   * Offer the ids an earlier daemon registered (`adopted`: this connection
   * was taken over), then attach every file the store holds. Sync.
   */
  start (adopted: boolean): void {
    for (let nodeid = 1; nodeid < this.#nodes.length; nodeid++) {
      const inode = this.#nodes[nodeid]
      if (inode === undefined || inode.entry.type !== 'file' || inode.entry.size === 0) continue
      const key = fileKey(inode, this.#tocs)
      this.#keyOf.set(nodeid, key)
      const same = this.#byKey.get(key)
      if (same === undefined) this.#byKey.set(key, [nodeid]); else same.push(nodeid)
    }
    if (adopted && this.#ids !== undefined) {
      for (const [nodeid, id] of this.#ids.load()) {
        if (!this.#keyOf.has(nodeid)) continue
        try {
          this.#backings.inherit(nodeid, id)
          this.#backed.set(nodeid, id)
        } catch (err) {
          this.#log(`passthrough: cannot offer backing id ${id} of node ${nodeid} again: ${describeError(err)}`)
        }
      }
    }
    for (const key of this.#byKey.keys()) if (this.#store.has(key)) this.#attach(key)
    this.#save()
  }

  /** The kernel asked for a READ of `nodeid`: look at it once the read has settled. Sync, O(1). */
  read (nodeid: number): void {
    if (this.#closed || this.#backed.has(nodeid) || !this.#keyOf.has(nodeid)) return
    this.#candidates.add(nodeid)
    this.#timer ??= setTimeout(() => { this.#timer = undefined; void this.#drain() }, SETTLE_MS)
  }

  stats (): PassthroughStats { return { backed: this.#backed.size, ...this.#stats } }

  /** Stop copying; resolves once a copy in flight has ended, so nothing writes into the store after it. Idempotent. */
  async close (): Promise<void> {
    this.#closed = true
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#unsubscribe()
    await this.#draining
  }

  #draining: Promise<void> | undefined

  async #drain (): Promise<void> {
    if (this.#copying) return
    this.#copying = true
    const done = this.#drainAll()
    this.#draining = done
    await done
  }

  async #drainAll (): Promise<void> {
    try {
      while (!this.#closed && this.#candidates.size > 0) {
        const nodeid: number = this.#candidates.values().next().value!
        this.#candidates.delete(nodeid)
        const key = this.#keyOf.get(nodeid)!
        if (this.#backed.has(nodeid)) continue
        if (!this.#store.has(key)) {
          const inode = this.#nodes[nodeid]!
          if (!this.#files.allCached(inode)) continue // partly read: stays on the FUSE path
          try {
            if (!await this.#store.put(key, inode.entry.size, async fd => { await this.#copy(inode, fd) })) continue
            this.#stats.copied++
          } catch (err) {
            this.#stats.copyFailures++
            this.#log(`passthrough: cannot copy ${inode.entry.path}: ${describeError(err)}`)
            continue
          }
        }
        this.#attach(key)
        this.#save()
      }
    } finally {
      this.#copying = false
    }
  }

  /** Write `inode`'s bytes (all cached) to `fd`. */
  async #copy (inode: MergedInode, fd: number): Promise<void> {
    const buf = Buffer.allocUnsafe(Math.min(COPY_BLOCK_BYTES, inode.entry.size))
    for (let pos = 0; pos < inode.entry.size;) {
      const n = await this.#files.read(inode, pos, buf.length, buf)
      if (n <= 0) throw new Error(`short read at ${pos} of ${inode.entry.size}`)
      let done = 0
      while (done < n) done += (await writeAt(fd, buf, done, n - done, pos + done)).bytesWritten
      pos += n
    }
  }

  /** Give every node with content `key` its backing file. */
  #attach (key: string): void {
    const fd = this.#store.openRead(key)
    if (fd === undefined) return
    try {
      for (const nodeid of this.#byKey.get(key) ?? []) {
        if (this.#backed.has(nodeid)) continue
        try {
          this.#backed.set(nodeid, this.#backings.attach(nodeid, fd))
        } catch (err) {
          this.#log(`passthrough: the kernel refused the backing file of ${this.#nodes[nodeid]?.entry.path}: ${describeError(err)}`)
        }
      }
    } finally {
      closeSync(fd)
    }
  }

  #retire (key: string): void {
    for (const nodeid of this.#byKey.get(key) ?? []) {
      if (!this.#backed.delete(nodeid)) continue
      try { this.#backings.retire(nodeid) } catch (err) { this.#log(`passthrough: cannot retire node ${nodeid}: ${describeError(err)}`) }
    }
    this.#save()
  }

  #save (): void {
    if (this.#ids === undefined || this.#closed) return
    try { this.#ids.save(this.#backed) } catch (err) { this.#log(`passthrough: cannot save backing ids (a takeover would not offer them): ${describeError(err)}`) }
  }
}
