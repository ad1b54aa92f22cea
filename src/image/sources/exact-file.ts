/**
 * Reading a regular file of a directory tree that must still hold exactly
 * the `size` bytes the walk saw: opened with O_NOFOLLOW (a path swapped for
 * a symlink is refused), and refused if it shrinks or grows while it is
 * read. One reader for every thread that reads tree files (the directory
 * walk, push's chunking workers), so the checks and messages are the same.
 *
 * Every function is synchronous: these are page-cached reads of small files,
 * and the callers (a walk, a worker thread) have nothing else to do meanwhile.
 *
 * May import: src/errors.ts, node built-ins.
 */
import { closeSync, constants, openSync, readSync } from 'node:fs'
import { BadInputError } from '../../errors.js'

const ONE_BYTE = Buffer.alloc(1)

/** An open file that must hold `size` bytes; `label` names it in errors. */
export class ExactFile {
  readonly #fd: number
  readonly #size: number
  readonly #label: string
  #done = 0

  /** Throws BadInputError when the file cannot be opened (or is now a symlink). */
  constructor (path: string, size: number, label: string) {
    this.#fd = openExact(path, label)
    this.#size = size
    this.#label = label
  }

  /**
   * Read the next min(remaining, buf.length) bytes into the start of `buf`
   * (fewer only at the end) and return them as a view; an empty view once
   * all `size` bytes are read and the file has ended there. Throws
   * BadInputError when the file shrank or grew.
   */
  read (buf: Uint8Array): Uint8Array {
    if (this.#done === this.#size) {
      if (readSync(this.#fd, ONE_BYTE, 0, 1, this.#size) !== 0) throw grewError(this.#label, this.#size)
      return buf.subarray(0, 0)
    }
    let got = 0
    const want = Math.min(buf.length, this.#size - this.#done)
    while (got < want) {
      const n = readSync(this.#fd, buf, got, want - got, this.#done + got)
      if (n === 0) throw shrankError(this.#label, this.#size, this.#done + got)
      got += n
    }
    this.#done += got
    return buf.subarray(0, got)
  }

  close (): void {
    closeSync(this.#fd)
  }
}

/**
 * The whole file into the start of `buf`, as a view. `buf` must hold
 * `size + 1` bytes: asking for one byte more than expected finds a file that
 * grew in the same read (a regular file returns a short read only at its
 * end), so a small file costs one read. Throws BadInputError as ExactFile does.
 */
export function readExactFile (path: string, size: number, label: string, buf: Uint8Array): Uint8Array {
  if (buf.length < size + 1) throw new Error(`internal: ${label}: a read buffer of ${buf.length} bytes cannot check ${size}`)
  const fd = openExact(path, label)
  try {
    let got = 0
    for (;;) {
      const n = readSync(fd, buf, got, size + 1 - got, got)
      if (n === 0) break
      got += n
      if (got > size) throw grewError(label, size)
    }
    if (got < size) throw shrankError(label, size, got)
    return buf.subarray(0, size)
  } finally {
    closeSync(fd)
  }
}

/** Open for reading, refusing a symlink (O_NOFOLLOW). Throws BadInputError. */
function openExact (path: string, label: string): number {
  try { return openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW) } catch (err) {
    throw new BadInputError(`${label}: cannot open: ${(err as Error).message}`, { cause: err })
  }
}

/** The error for a file found longer than the `size` bytes it must hold (also block views'). */
export function grewError (label: string, size: number): BadInputError {
  return new BadInputError(`${label}: grew beyond ${size} bytes while being read`)
}

/** The error for a file that ended after `got` of the `size` bytes it must hold. */
export function shrankError (label: string, size: number, got: number): BadInputError {
  return new BadInputError(`${label}: shrank from ${size} to ${got} bytes while being read`)
}
