/**
 * LayoutFiles: the few file operations an image reader needs, over either a
 * directory (an OCI image layout) or an archive read in place (an OCI
 * archive or a docker-archive, through TarIndex). Paths are relative,
 * slash-separated and already validated by the caller (built from checked
 * digests or normalized manifest entries).
 *
 * May import: src/errors.ts, tar-index.ts, layer-tar.ts (constants).
 */
import { createReadStream } from 'node:fs'
import { open, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { BadInputError } from '../../errors.js'
import type { TarIndex } from './tar-index.js'
import { LAYER_READ_BYTES } from './layer-tar.js'

/** Largest JSON document (index, manifest, config) read from an image. */
export const MAX_JSON_BYTES = 16 * 1024 * 1024

export interface LayoutFiles {
  /** The input as the user named it, e.g. `OCI layout /srv/img` or `docker-archive img.tar`. */
  readonly label: string
  /** Size in bytes of the regular file at `rel`, or undefined when there is none. Async. */
  size (rel: string): Promise<number | undefined>
  /** The whole file, at most `maxBytes`. Async; BadInputError when missing or larger. */
  read (rel: string, maxBytes: number): Promise<Buffer>
  /** A stream of the file's bytes. The caller consumes or destroys it. */
  open (rel: string): Readable
}

/** LayoutFiles over a directory. */
export function directoryFiles (dir: string, label: string): LayoutFiles {
  return {
    label,
    async size (rel) {
      try {
        const st = await stat(join(dir, rel))
        return st.isFile() ? st.size : undefined
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined
        throw new BadInputError(`${label}: cannot read ${rel}: ${(err as Error).message}`, { cause: err })
      }
    },
    async read (rel, maxBytes) {
      let fh
      try { fh = await open(join(dir, rel), 'r') } catch (err) {
        throw new BadInputError(`${label}: cannot read ${rel}: ${(err as Error).message}`, { cause: err })
      }
      try {
        const size = (await fh.stat()).size
        if (size > maxBytes) throw new BadInputError(`${label}: ${rel} is ${size} bytes, more than the ${maxBytes} expected`)
        const buf = Buffer.alloc(size)
        const { bytesRead } = await fh.read(buf, 0, size, 0)
        return buf.subarray(0, bytesRead)
      } finally {
        await fh.close()
      }
    },
    open (rel) {
      return createReadStream(join(dir, rel), { highWaterMark: LAYER_READ_BYTES })
    }
  }
}

/** LayoutFiles over the members of an archive; links between members are followed inside it. */
export function archiveFiles (index: TarIndex, label: string): LayoutFiles {
  const member = (rel: string): ReturnType<TarIndex['resolveFile']> => index.resolveFile(rel)
  return {
    label,
    async size (rel) {
      return member(rel)?.size
    },
    async read (rel, maxBytes) {
      const m = member(rel)
      if (m === undefined) throw new BadInputError(`${label}: ${rel} is not in the archive`)
      return await index.read(m, maxBytes)
    },
    open (rel) {
      const m = member(rel)
      if (m === undefined) return Readable.from((async function * () { throw new BadInputError(`${label}: ${rel} is not in the archive`) })())
      return index.open(m)
    }
  }
}

/** Parse a JSON document read from an image. Sync; BadInputError naming the input and the document. */
export function parseImageJson (bytes: Uint8Array, label: string, what: string): unknown {
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes))
  } catch (err) {
    throw new BadInputError(`${label}: ${what} is not valid JSON: ${(err as Error).message}`, { cause: err })
  }
}
