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
    try { this.#fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW) } catch (err) {
      throw new BadInputError(`${label}: cannot open: ${(err as Error).message}`, { cause: err })
    }
    this.#size = size
    this.#label = label
  }

  /** Bytes not read yet. */
  get remaining (): number {
    return this.#size - this.#done
  }

  /**
   * Read the next min(remaining, buf.length) bytes into the start of `buf`
   * (fewer only at the end) and return them as a view; an empty view once
   * all `size` bytes are read and the file has ended there. Throws
   * BadInputError when the file shrank or grew.
   */
  read (buf: Uint8Array): Uint8Array {
    if (this.#done === this.#size) {
      if (readSync(this.#fd, ONE_BYTE, 0, 1, this.#size) !== 0) throw new BadInputError(`${this.#label}: grew beyond ${this.#size} bytes while being read`)
      return buf.subarray(0, 0)
    }
    let got = 0
    const want = Math.min(buf.length, this.#size - this.#done)
    while (got < want) {
      const n = readSync(this.#fd, buf, got, want - got, this.#done + got)
      if (n === 0) throw new BadInputError(`${this.#label}: shrank from ${this.#size} to ${this.#done + got} bytes while being read`)
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
 * The whole file into the start of `buf` (which must hold `size` bytes), as
 * a view. Throws BadInputError as ExactFile does.
 */
export function readExactFile (path: string, size: number, label: string, buf: Uint8Array): Uint8Array {
  const file = new ExactFile(path, size, label)
  try {
    const content = file.read(buf.subarray(0, size))
    if (content.length !== size || file.read(buf).length !== 0) throw new Error(`internal: ${label}: short read`)
    return content
  } finally {
    file.close()
  }
}
