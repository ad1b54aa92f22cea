/**
 * Layer TOC: the complete description of one layer's file tree, and of where
 * every byte of file content lives in the store.
 *
 * A TOC is a layer's diff, in tar order, including whiteout and opaque
 * markers. Merging TOCs into a root filesystem is
 * `merge.ts`'s job. File content is a list of spans over chunks; a chunk is
 * the unit of fetch, verification (sha256 of its plain bytes) and dedup, and
 * lives at a byte range of a blob (a pack of zstd frames).
 *
 * Encoding: canonical JSON with short keys (this module), zstd-compressed by
 * the metadata object layer. The TOC object's sha256 is the layer's identity.
 * `decodeToc` treats its input as hostile and validates everything.
 *
 * Pure: no fs, network or native code.
 */
import { CorruptObjectError } from '../errors.js'
import { isDigest, isHex256 } from './digest.js'
import { isNormalizedPath } from './paths.js'

/**
 * `whiteout` hides the path in lower layers (OCI `.wh.NAME`); `opaque` at a
 * directory's path hides everything below it in lower layers (OCI
 * `.wh..wh..opq`). Both apply to lower layers only, never to their own layer.
 */
export type EntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo' | 'whiteout' | 'opaque'

/** A byte range of one chunk: `length` plain bytes starting at `offset` of chunk number `chunk` in `LayerToc.chunks`. */
export interface ChunkSpan { chunk: number, offset: number, length: number }

/** Where a chunk's compressed bytes live: `compressedLength` bytes at `offset` of blob number `blob` in `LayerToc.blobs`. */
export interface ChunkLocation {
  /** sha256 hex of the plain (uncompressed) bytes. */
  digest: string
  blob: number
  offset: number
  compressedLength: number
  /** Plain length in bytes. */
  length: number
}

export interface TocEntry {
  /** Normalized relative path; '' is the root directory. */
  path: string
  type: EntryType
  /** Permission bits including setuid, setgid and sticky (0o7777). */
  mode: number
  uid: number
  gid: number
  /** Modification time, whole seconds since the epoch (may be negative). */
  mtime: number
  /** Plain size of a regular file; 0 otherwise. */
  size: number
  /** Symlink target (verbatim), or hardlink target path (normalized, earlier in this layer or in a lower one). */
  target?: string
  devMajor?: number
  devMinor?: number
  /** Extended attributes, values as base64. */
  xattrs?: Record<string, string>
  /** File content, in order; the lengths sum to `size`. */
  spans?: ChunkSpan[]
}

export interface LayerToc {
  /** OCI diff_id: sha256 of the uncompressed layer tar as pushed; 'sha256:' + 64 zeros when pushed from a directory. */
  diffId: string
  /** Blob digests (hex) referenced by `chunks`. */
  blobs: string[]
  chunks: ChunkLocation[]
  entries: TocEntry[]
}

export const TOC_VERSION = 1
const TYPE_CODES: Record<EntryType, string> = {
  file: 'f', dir: 'd', symlink: 'l', hardlink: 'h', char: 'c', block: 'b', fifo: 'p', whiteout: 'w', opaque: 'o'
}
const CODE_TYPES = new Map(Object.entries(TYPE_CODES).map(([k, v]) => [v, k as EntryType]))
const MAX_MODE = 0o7777

/** Canonical bytes of a TOC. Deterministic for equal input. */
export function encodeToc (toc: LayerToc): Uint8Array {
  const entries = toc.entries.map(e => {
    const o: Record<string, unknown> = { p: e.path, t: TYPE_CODES[e.type], m: e.mode, u: e.uid, g: e.gid, mt: e.mtime }
    if (e.size !== 0) o.s = e.size
    if (e.target !== undefined) o.l = e.target
    if (e.devMajor !== undefined || e.devMinor !== undefined) o.dv = [e.devMajor ?? 0, e.devMinor ?? 0]
    if (e.xattrs !== undefined && Object.keys(e.xattrs).length > 0) o.x = sortedObject(e.xattrs)
    if (e.spans !== undefined && e.spans.length > 0) o.c = e.spans.flatMap(s => [s.chunk, s.offset, s.length])
    return o
  })
  const doc = {
    v: TOC_VERSION,
    diffId: toc.diffId,
    blobs: toc.blobs,
    chunks: toc.chunks.map(c => [c.digest, c.blob, c.offset, c.compressedLength, c.length]),
    entries
  }
  return new TextEncoder().encode(JSON.stringify(doc))
}

/**
 * Parse and validate TOC bytes. Throws CorruptObjectError naming `source`
 * (for messages: the object key) and the first problem found.
 */
export function decodeToc (bytes: Uint8Array, source: string): LayerToc {
  const fail = (why: string): never => { throw new CorruptObjectError(`layer TOC ${source} is invalid: ${why}`) }
  let doc: any
  try { doc = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) } catch (err) {
    throw new CorruptObjectError(`layer TOC ${source} is not valid JSON`, { cause: err })
  }
  if (doc === null || typeof doc !== 'object') fail('not an object')
  if (doc.v !== TOC_VERSION) fail(`unsupported version ${JSON.stringify(doc.v)}`)
  if (!isDigest(doc.diffId)) fail('diffId is not a sha256 digest')
  if (!Array.isArray(doc.blobs) || !doc.blobs.every(isHex256)) fail('blobs must be sha256 hex strings')
  if (!Array.isArray(doc.chunks)) fail('chunks is not an array')
  if (!Array.isArray(doc.entries)) fail('entries is not an array')
  const blobCount = doc.blobs.length
  // Hot at mount time (a Debian + python image has 16,000 chunks and 8,000 entries): plain loops, no per-item arrays.
  const chunks: ChunkLocation[] = new Array(doc.chunks.length)
  for (let i = 0; i < chunks.length; i++) {
    const c = doc.chunks[i]
    if (!Array.isArray(c) || c.length !== 5 || !isHex256(c[0]) || !isCount(c[1]) || !isCount(c[2]) || !isCount(c[3]) || !isCount(c[4])) fail(`chunk ${i} is malformed`)
    if (c[1] >= blobCount) fail(`chunk ${i} names blob ${c[1]}, which does not exist`)
    chunks[i] = { digest: c[0], blob: c[1], offset: c[2], compressedLength: c[3], length: c[4] }
  }
  const entries: TocEntry[] = doc.entries.map((raw: any, i: number) => decodeEntry(raw, i, chunks, fail))
  return { diffId: doc.diffId, blobs: doc.blobs, chunks, entries }
}

function decodeEntry (raw: any, i: number, chunks: ChunkLocation[], fail: (why: string) => never): TocEntry {
  if (raw === null || typeof raw !== 'object') fail(`entry ${i} is not an object`)
  const type = CODE_TYPES.get(raw.t)
  if (type === undefined) fail(`entry ${i} has unknown type ${JSON.stringify(raw.t)}`)
  if (typeof raw.p !== 'string' || !isNormalizedPathFast(raw.p)) fail(`entry ${i} has an invalid path ${JSON.stringify(raw.p)}`)
  // Built only for a message: JSON.stringify of every path was a third of decoding.
  const where = (): string => `entry ${JSON.stringify(raw.p)}`
  if (!isCount(raw.m) || raw.m > MAX_MODE) fail(`${where()} has an invalid mode`)
  if (!isCount(raw.u) || !isCount(raw.g)) fail(`${where()} has an invalid uid/gid`)
  if (!Number.isSafeInteger(raw.mt)) fail(`${where()} has an invalid mtime`)
  const size = raw.s ?? 0
  if (!isCount(size) || (size !== 0 && type !== 'file')) fail(`${where()} has an invalid size`)
  const e: TocEntry = { path: raw.p, type: type!, mode: raw.m, uid: raw.u, gid: raw.g, mtime: raw.mt, size }
  if (raw.l !== undefined) {
    if (typeof raw.l !== 'string' || raw.l.includes('\0') || (type !== 'symlink' && type !== 'hardlink')) fail(`${where()} has an invalid link target`)
    if (type === 'hardlink' && !isNormalizedPath(raw.l)) fail(`${where()} has a hardlink target that is not a normalized path`)
    e.target = raw.l
  } else if (type === 'symlink' || type === 'hardlink') fail(`${where()} has no link target`)
  if (raw.dv !== undefined) {
    if (!Array.isArray(raw.dv) || raw.dv.length !== 2 || !raw.dv.every(isCount)) fail(`${where()} has invalid device numbers`)
    e.devMajor = raw.dv[0]; e.devMinor = raw.dv[1]
  }
  if (raw.x !== undefined) {
    if (raw.x === null || typeof raw.x !== 'object' || !Object.values(raw.x).every(v => typeof v === 'string')) fail(`${where()} has invalid xattrs`)
    e.xattrs = raw.x
  }
  if (raw.c !== undefined) {
    const c = raw.c
    if (type !== 'file' || !Array.isArray(c) || c.length % 3 !== 0) fail(`${where()} has invalid chunk spans`)
    const spans: ChunkSpan[] = new Array(c.length / 3)
    let total = 0
    for (let k = 0; k < c.length; k += 3) {
      const chunk = c[k]; const offset = c[k + 1]; const length = c[k + 2]
      if (!isCount(chunk) || !isCount(offset) || !isCount(length)) fail(`${where()} has invalid chunk spans`)
      const loc = chunks[chunk]
      if (loc === undefined) fail(`${where()} names chunk ${chunk}, which does not exist`)
      if (length === 0 || offset + length > loc!.length) fail(`${where()} has a span outside chunk ${chunk}`)
      spans[k / 3] = { chunk, offset, length }
      total += length
    }
    if (total !== size) fail(`${where()} has spans totalling ${total} bytes but a size of ${size}`)
    e.spans = spans
  } else if (size !== 0) fail(`${where()} has a size but no content`)
  return e
}

/**
 * isNormalizedPath, with a fast yes for the common case: at most 85 UTF-16
 * units (so no component can exceed 255 UTF-8 bytes, nor the path 4096), no
 * NUL, no empty, `.` or `..` component. Anything else takes the full check.
 */
function isNormalizedPathFast (p: string): boolean {
  if (p.length <= 85 && FAST_PATH_RE.test(p) && !DOT_COMPONENT_RE.test(p)) return true
  return isNormalizedPath(p)
}
const FAST_PATH_RE = /^[^/\0]+(?:\/[^/\0]+)*$/
const DOT_COMPONENT_RE = /(?:^|\/)\.\.?(?:\/|$)/

function isCount (n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0
}

function sortedObject (o: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
}

/** A chunk with its blob resolved: everything needed to fetch and verify it, on its own. */
export interface ChunkRef {
  /** sha256 hex of the plain bytes. */
  digest: string
  /** sha256 hex of the blob holding it. */
  blob: string
  offset: number
  compressedLength: number
  length: number
}

export function resolveChunk (toc: LayerToc, index: number): ChunkRef {
  const c = toc.chunks[index]
  if (c === undefined) throw new RangeError(`chunk ${index} is not in this TOC`)
  return { digest: c.digest, blob: toc.blobs[c.blob]!, offset: c.offset, compressedLength: c.compressedLength, length: c.length }
}
