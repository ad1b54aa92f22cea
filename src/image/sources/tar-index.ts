/**
 * TarIndex: random access into an outer archive (an OCI archive or a
 * docker-archive tar) without extracting it.
 *
 * One pass over the headers (data is skipped by seeking) records each
 * member's normalized name → data offset, size, kind and link name, with
 * ustar prefixes, PAX path/size/linkpath records and GNU long names applied
 * by the shared strict decoder (tar-header.ts). Members are then read with
 * ranged file streams. Symlink and hardlink members (docker's legacy
 * `<id>/layer.tar` links) are resolved inside the archive, a bounded number
 * of hops, never outside it.
 *
 * May import: src/errors.ts, src/format/, tar-header.ts.
 */
import { createReadStream } from 'node:fs'
import { Readable } from 'node:stream'
import { open, type FileHandle } from 'node:fs/promises'
import { BadInputError, LimitExceededError } from '../../errors.js'
import { normalizeEntryPath, parentPath } from '../../format/paths.js'
import { LAYER_READ_BYTES } from './layer-tar.js'
import { TAR_BLOCK_BYTES, TarHeaderDecoder, TarSyntaxError, paddedSize, type MemberKind } from './tar-header.js'

export interface ArchiveMember {
  /** Normalized name ('' for `./`). */
  name: string
  kind: MemberKind
  dataOffset: number
  size: number
  /** Normalized link target inside the archive (hardlinks), or the verbatim target (symlinks). */
  linkname: string
}

const READ_WINDOW_BYTES = 64 * 1024
const MAX_LINK_HOPS = 16

export interface ScanOptions {
  /** Refuse archives with more members than this (LimitExceededError). */
  maxMembers: number
  /** Stop early, returning undefined, when this says a member cannot belong to the kind of archive wanted. */
  accept?: (name: string) => boolean
}

export class TarIndex {
  /** The archive's path, for messages. */
  readonly path: string
  readonly #members: Map<string, ArchiveMember>

  private constructor (path: string, members: Map<string, ArchiveMember>) {
    this.path = path
    this.#members = members
  }

  /**
   * Scan the archive at `path`. Async. Returns undefined when `accept`
   * rejects a member name (the caller tries another interpretation). Throws
   * BadInputError for a corrupt or truncated archive, duplicate or escaping
   * member names; LimitExceededError past `maxMembers`.
   */
  static async scan (path: string, opts: ScanOptions): Promise<TarIndex | undefined> {
    const fh = await open(path, 'r')
    try {
      const size = (await fh.stat()).size
      const members = await scanMembers(fh, path, size, opts)
      return members === undefined ? undefined : new TarIndex(path, members)
    } finally {
      await fh.close()
    }
  }

  /** Names of all members. */
  names (): string[] {
    return [...this.#members.keys()]
  }

  /** The member at `name` (normalized), without following links. */
  member (name: string): ArchiveMember | undefined {
    return this.#members.get(name)
  }

  /**
   * The regular-file member that `name` designates, following symlink and
   * hardlink members inside the archive. Sync. Returns undefined when there
   * is no such member; throws BadInputError for a link that escapes the
   * archive, loops, or ends at something that is not a regular file.
   */
  resolveFile (name: string): ArchiveMember | undefined {
    let current = name
    for (let hop = 0; hop <= MAX_LINK_HOPS; hop++) {
      const m = this.#members.get(current)
      if (m === undefined) return undefined
      if (m.kind === 'file') return m
      if (m.kind === 'hardlink') { current = m.linkname; continue }
      if (m.kind !== 'symlink') throw new BadInputError(`archive ${this.path}: member ${JSON.stringify(name)} is a ${m.kind}, not a file`)
      current = resolveLinkTarget(this.path, m.name, m.linkname)
    }
    throw new BadInputError(`archive ${this.path}: member ${JSON.stringify(name)} is a chain of more than ${MAX_LINK_HOPS} links`)
  }

  /** A stream of a member's data (`resolveFile` result). The caller consumes or destroys it. */
  open (m: ArchiveMember): Readable {
    // createReadStream's `end` is inclusive, so an empty member cannot be expressed as a range.
    if (m.size === 0) return Readable.from([])
    return createReadStream(this.path, { start: m.dataOffset, end: m.dataOffset + m.size - 1, highWaterMark: LAYER_READ_BYTES })
  }

  /** A whole member's data, at most `maxBytes`. Async; throws BadInputError if it is larger. */
  async read (m: ArchiveMember, maxBytes: number): Promise<Buffer> {
    if (m.size > maxBytes) throw new BadInputError(`archive ${this.path}: member ${JSON.stringify(m.name)} is ${m.size} bytes, more than the ${maxBytes} expected`)
    const fh = await open(this.path, 'r')
    try {
      const buf = Buffer.alloc(m.size)
      const { bytesRead } = await fh.read(buf, 0, m.size, m.dataOffset)
      if (bytesRead !== m.size) throw new BadInputError(`archive ${this.path}: member ${JSON.stringify(m.name)} is truncated`)
      return buf
    } finally {
      await fh.close()
    }
  }
}

/** Resolve a symlink member's target relative to its directory, inside the archive. Sync; throws BadInputError when it escapes. */
function resolveLinkTarget (archive: string, linkName: string, target: string): string {
  if (target.startsWith('/')) throw new BadInputError(`archive ${archive}: member ${JSON.stringify(linkName)} is a symlink to the absolute path ${JSON.stringify(target)}`)
  const parts = (parentPath(linkName) ?? '').split('/').filter(p => p !== '')
  for (const part of target.split('/')) {
    if (part === '' || part === '.') continue
    if (part === '..') {
      if (parts.length === 0) throw new BadInputError(`archive ${archive}: member ${JSON.stringify(linkName)} is a symlink to ${JSON.stringify(target)}, outside the archive`)
      parts.pop()
    } else parts.push(part)
  }
  return parts.join('/')
}

async function scanMembers (fh: FileHandle, path: string, fileSize: number, opts: ScanOptions): Promise<Map<string, ArchiveMember> | undefined> {
  const decoder = new TarHeaderDecoder()
  const members = new Map<string, ArchiveMember>()
  const window = { start: 0, bytes: Buffer.alloc(0) }
  const readAt = async (pos: number, length: number): Promise<Buffer> => {
    if (pos >= window.start && pos + length <= window.start + window.bytes.length) {
      return window.bytes.subarray(pos - window.start, pos - window.start + length)
    }
    const buf = Buffer.alloc(Math.max(length, READ_WINDOW_BYTES))
    const { bytesRead } = await fh.read(buf, 0, buf.length, pos)
    window.start = pos
    window.bytes = buf.subarray(0, bytesRead)
    if (bytesRead < length) throw new BadInputError(`archive ${path}: unexpected end of data at offset ${pos + bytesRead} (truncated?)`)
    return window.bytes.subarray(0, length)
  }
  let pos = 0
  try {
    while (pos + TAR_BLOCK_BYTES <= fileSize) {
      const result = decoder.header(await readAt(pos, TAR_BLOCK_BYTES), pos)
      if (result.kind === 'zero') break
      if (result.kind === 'extension') {
        decoder.extensionBody(await readAt(pos + TAR_BLOCK_BYTES, result.bodyBytes))
        pos += TAR_BLOCK_BYTES + paddedSize(result.bodyBytes)
        continue
      }
      const m = result.member
      const v = normalizeEntryPath(m.name)
      if (!v.ok) throw new BadInputError(`archive ${path}: member ${JSON.stringify(m.name)} ${v.reason}`)
      if (opts.accept !== undefined && !opts.accept(v.path)) return undefined
      if (members.size >= opts.maxMembers) throw new LimitExceededError(`archive ${path}: more than ${opts.maxMembers} members`)
      if (m.dataOffset + m.size > fileSize) {
        throw new BadInputError(`archive ${path}: member ${JSON.stringify(m.name)} extends past the end of the file (truncated?)`)
      }
      let linkname = m.linkname
      if (m.kind === 'hardlink') {
        const t = normalizeEntryPath(m.linkname)
        if (!t.ok) throw new BadInputError(`archive ${path}: member ${JSON.stringify(m.name)} is a hardlink whose target ${t.reason}`)
        linkname = t.path
      }
      const existing = members.get(v.path)
      if (existing !== undefined && !(existing.kind === 'dir' && m.kind === 'dir')) {
        throw new BadInputError(`archive ${path}: member ${JSON.stringify(v.path)} appears twice`)
      }
      members.set(v.path, { name: v.path, kind: m.kind, dataOffset: m.dataOffset, size: m.size, linkname })
      pos = m.dataOffset + paddedSize(m.size)
    }
  } catch (err) {
    if (err instanceof TarSyntaxError) throw new BadInputError(`archive ${path}: ${err.message}`, { cause: err })
    throw err
  }
  return members
}
