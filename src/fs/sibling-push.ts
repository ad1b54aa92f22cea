/**
 * Small files share chunks (push packs a layer's small files into one
 * stream before cutting it), so when a read decodes a chunk, the other
 * files in it are usually read next: the rest of a directory a tree walk
 * or an import is going through. The kernel backend puts those files into
 * the page cache right away (FUSE_NOTIFY_STORE, from bytes already
 * decoded), so their reads need no request at all. Each chunk is pushed
 * once per mount; a file the kernel has not looked up yet is skipped by
 * the kernel (ENOENT), and one it evicts later is simply read again.
 *
 * Only files whose whole content is one span of the chunk are pushed
 * (offset 0 to EOF, so the kernel can mark the pages up to date).
 *
 * May import: src/format/, ./kernel-fuse-table.ts (types).
 */
import type { MergedInode } from '../format/merge.js'

/** Files of one chunk: nodeid, offset in the chunk, length; flattened. */
type Siblings = number[]

export interface SiblingPushTarget {
  /** Store `length` bytes of `data` as the content of `nodeid` from offset 0; returns 0 or an errno. */
  store: (nodeid: number, data: Buffer, length: number) => number
}

export class SiblingPush {
  /** Files pushed, and pushes the kernel refused (no inode yet). */
  readonly counters = { pushedFiles: 0, refused: 0 }
  readonly #inodes: ReadonlyArray<MergedInode | undefined>
  /** By layer, by chunk index; built on first use. */
  #index: Array<Array<Siblings | undefined>> | undefined
  readonly #done: Array<Set<number>> = []
  #queue: Array<{ siblings: Siblings, data: Buffer }> = []

  constructor (inodes: ReadonlyArray<MergedInode | undefined>) {
    this.#inodes = inodes
  }

  /** A read used chunk `chunk` of `layer` (its bytes valid during the call): queue its other files. Sync. */
  observe (layer: number, chunk: number, data: Uint8Array): void {
    const done = (this.#done[layer] ??= new Set())
    if (done.has(chunk)) return
    done.add(chunk)
    const siblings = this.#indexed()[layer]?.[chunk]
    if (siblings === undefined || siblings.length < 6) return // fewer than two files: nothing else to push
    this.#queue.push({ siblings, data: Buffer.from(data) })
  }

  /** Push what observe() queued. Sync; call after the read's reply is sent. */
  flush (target: SiblingPushTarget): void {
    if (this.#queue.length === 0) return
    const queue = this.#queue
    this.#queue = []
    for (const { siblings, data } of queue) {
      for (let i = 0; i < siblings.length; i += 3) {
        const at = siblings[i + 1]!
        const length = siblings[i + 2]!
        const err = target.store(siblings[i]!, data.subarray(at, at + length), length)
        if (err === 0) this.counters.pushedFiles++
        else this.counters.refused++
      }
    }
  }

  #indexed (): Array<Array<Siblings | undefined>> {
    if (this.#index !== undefined) return this.#index
    const index: Array<Array<Siblings | undefined>> = []
    for (let nodeid = 1; nodeid < this.#inodes.length; nodeid++) {
      const inode = this.#inodes[nodeid]
      const spans = inode?.entry.spans
      if (inode === undefined || spans === undefined || spans.length !== 1 || inode.entry.size === 0) continue
      const span = spans[0]!
      const byChunk = (index[inode.layer] ??= [])
      ;(byChunk[span.chunk] ??= []).push(nodeid, span.offset, span.length)
    }
    this.#index = index
    return index
  }
}
