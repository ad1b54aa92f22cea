/**
 * The /dev/fuse fds the holder keeps for layerd, by name (a connection's
 * mountpoint record, src/holder/connection-keeper.ts). The holder owns each
 * fd from `put` until layerd drops it, it is replaced, or the holder ends.
 *
 * May import: node built-ins.
 */
import { closeSync } from 'node:fs'

export class KeptFds {
  readonly #fds = new Map<string, number>()

  /** How many fds are kept. */
  get size (): number { return this.#fds.size }

  /** Keep `fd` under `name`, closing the fd kept there before. Sync. */
  put (name: string, fd: number): void {
    const old = this.#fds.get(name)
    if (old !== undefined) closeSync(old)
    this.#fds.set(name, fd)
  }

  /** Close and forget the fd under `name` (none: nothing happens). Sync. */
  drop (name: string): void {
    const fd = this.#fds.get(name)
    if (fd !== undefined) closeSync(fd)
    this.#fds.delete(name)
  }

  /** Every kept fd with its name; they stay owned here. */
  entries (): IterableIterator<[string, number]> {
    return this.#fds.entries()
  }

  /** Close every kept fd (the holder ends: the kernel ends the connections no other process holds). Sync; never throws. */
  closeAll (): void {
    for (const fd of this.#fds.values()) { try { closeSync(fd) } catch {} }
    this.#fds.clear()
  }
}
