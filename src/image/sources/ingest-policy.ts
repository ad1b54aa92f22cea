/**
 * Ingest policy: what `layerctl push` accepts from an input image, what it
 * neutralises, and what it refuses. Enforced for every source kind (OCI
 * layout and archive, docker-archive, rootfs tar, directory) by
 * {@link LayerPolicy}, one instance per layer. Every input is treated as
 * hostile; every error names the input, the layer and the entry.
 *
 * Accepted and neutralised (a warning; an error with `strict`):
 * - an absolute entry name (`/etc/passwd`) or hardlink target is made
 *   relative to the image root, as docker does;
 * - bytes after a tar's end-of-archive marker are ignored (as GNU tar and
 *   Go's archive/tar do). A tar without the marker, or without the zero
 *   padding after its last entry's data, is read to its end silently
 *   (umoci writes layers that way; Go accepts them);
 * - `.wh..wh.*` markers other than the opaque marker (aufs metadata) are
 *   skipped;
 * - (directory sources) sockets are skipped; mount points inside the
 *   directory are recorded as empty directories (like `tar --one-file-system`).
 *
 * Translated: `DIR/.wh..wh..opq` becomes an `opaque` entry at DIR and
 * `DIR/.wh.NAME` a `whiteout` entry at DIR/NAME, in every source kind. Both
 * apply to lower layers only; a whiteout and an entry at the same path may
 * coexist in one layer (OCI image spec).
 *
 * Refused with BadInputError:
 * - a `..` component in an entry name or hardlink target, a NUL byte, a
 *   component over 255 bytes or a path over 4096 bytes, a name that is not
 *   valid UTF-8 (it could not round-trip);
 * - a symlink whose relative target climbs above the image root
 *   (`symlinkEscapesRoot`), an empty or NUL-containing symlink target;
 * - a hardlink whose target is itself, the root, a directory of this layer,
 *   or lies below a symlink or non-directory of this layer; a target not
 *   (yet) seen in the layer is accepted: it may be in a lower layer, and the
 *   merge checks it;
 * - an entry below a symlink or non-directory of the same layer
 *   (`a -> /etc` then `a/passwd`), or a non-directory at a path that earlier
 *   entries of the layer used as a directory;
 * - the same path twice in one layer (extractors disagree on which wins),
 *   including two whiteouts or two opaque markers for one path;
 * - anything but a directory at the root; a whiteout of the root;
 * - corrupt framing: bad header checksums, malformed numeric fields or PAX
 *   records, data on header-only entries (symlinks, directories, …), GNU
 *   sparse files, unknown entry types, truncated tar, gzip or zstd data,
 *   a digest that does not match the manifest or the config's diff_ids.
 *
 * Refused with LimitExceededError ({@link IngestLimits}): a declared entry
 * size above `maxEntryBytes`, more than `maxEntries` entries in a layer, more
 * than `maxLayerBytes` of decompressed layer tar, or a decompressed/compressed
 * ratio above `maxCompressionRatio` once `ratioFloorBytes` have been
 * decompressed. Sizes are checked as bytes leave the decompressor, so a bomb
 * stops within one decompressor buffer of the limit.
 *
 * Kept as is: mode bits (masked to 0o7777: setuid, setgid, sticky), uid/gid,
 * mtime (whole seconds, may be negative), device numbers, xattrs (values
 * base64), symlink targets verbatim.
 *
 * May import: src/errors.ts, src/format/.
 */
import { BadInputError, LimitExceededError } from '../../errors.js'
import { normalizeEntryPath, parentPath, baseName, joinPath, symlinkEscapesRoot } from '../../format/paths.js'
import type { TarHeader } from '../../format/tar-header.js'
import { DEFAULT_INGEST_LIMITS, type EntryHeader, type IngestLimits, type OpenImageSourceOptions } from './image-source.js'

export const WHITEOUT_PREFIX = '.wh.'
export const OPAQUE_MARKER = '.wh..wh..opq'
const WHITEOUT_META_PREFIX = '.wh..wh.'
const MAX_XATTR_NAME_BYTES = 255
const MAX_XATTR_VALUE_BYTES = 64 * 1024
const MAX_ID = 2 ** 32 - 1

/** Limits, warning sink and strictness shared by every layer of one input. */
export interface IngestContext {
  readonly limits: IngestLimits
  readonly strict: boolean
  /** Report something odd but accepted; throws BadInputError instead in strict mode. */
  notice (message: string): void
}

/** The context for one `openImageSource` call. Sync. */
export function ingestContext (opts: OpenImageSourceOptions = {}): IngestContext {
  const limits = { ...DEFAULT_INGEST_LIMITS, ...opts.limits }
  const strict = opts.strict === true
  const warn = opts.warn ?? (() => {})
  return {
    limits,
    strict,
    notice (message: string): void {
      if (strict) throw new BadInputError(`${message} (refused in strict mode)`)
      warn(message)
    }
  }
}

/**
 * An entry as an input describes it, before policy: a name not yet
 * normalized, no whiteout translation; `linkname` is the symlink or hardlink
 * target as stored. The fields of a tar header, whatever the input's kind.
 */
export type RawEntry = TarHeader

type Seen = 'dir' | 'other' | 'symlink'

/**
 * Checks the entries of one layer, in input order, and turns them into TOC
 * entry headers. One instance per layer; not reusable.
 */
export class LayerPolicy {
  readonly #layer: string
  readonly #ctx: IngestContext
  readonly #entries = new Map<string, Seen>()
  readonly #impliedDirs = new Set<string>()
  readonly #whiteouts = new Set<string>()
  readonly #opaques = new Set<string>()
  #count = 0

  /** `layerName` names the input and the layer, e.g. `docker-archive img.tar, layer 2 of 3 (…/layer.tar)`. */
  constructor (layerName: string, ctx: IngestContext) {
    this.#layer = layerName
    this.#ctx = ctx
  }

  /**
   * Check one entry and return its normalized header, or undefined when the
   * policy skips it (with a warning). `where` locates it in the input for
   * messages (e.g. `at offset 1536`). Sync; throws BadInputError or
   * LimitExceededError naming the layer and the entry.
   */
  admit (raw: RawEntry, where = ''): EntryHeader | undefined {
    // Messages are built only when needed: admit runs once per entry, on push's busiest thread.
    let label: string | undefined
    const named = (): string => (label ??= `${this.#layer}: entry ${JSON.stringify(raw.name)}${where === '' ? '' : ` ${where}`}`)
    const fail = (why: string): never => { throw new BadInputError(`${named()} ${why}`) }
    if (++this.#count > this.#ctx.limits.maxEntries) {
      throw new LimitExceededError(`${this.#layer}: more than ${this.#ctx.limits.maxEntries} entries (at entry ${JSON.stringify(raw.name)})`)
    }
    const v = normalizeEntryPath(raw.name)
    if (!v.ok) return fail(`is refused: the name ${v.reason}`)
    // umoci names the root '/'; only other absolute names are worth a warning.
    if (v.wasAbsolute && v.path !== '') this.#ctx.notice(`${named()} has an absolute name; stored as ${JSON.stringify(v.path)}`)
    this.#checkNumbers(raw, fail)

    const base = baseName(v.path)
    if (base.startsWith(WHITEOUT_PREFIX)) return this.#admitMarker(v.path, base, raw, named(), fail)

    const path = v.path
    this.#checkAncestors(path, fail)
    if (this.#entries.has(path)) fail('appears twice in the layer (tar readers disagree on which copy wins)')
    if (path === '' && raw.type !== 'dir') fail(`is a ${raw.type} at the image root, which must be a directory`)
    if (raw.type !== 'dir' && this.#impliedDirs.has(path)) fail(`is a ${raw.type}, but earlier entries of the layer are inside it`)

    const header: EntryHeader = {
      path, type: raw.type, mode: raw.mode & 0o7777, uid: raw.uid, gid: raw.gid, mtime: raw.mtime, size: 0
    }
    if (raw.type === 'file') {
      if (raw.size > this.#ctx.limits.maxEntryBytes) {
        throw new LimitExceededError(`${named()} is ${raw.size} bytes, above the limit of ${this.#ctx.limits.maxEntryBytes}`)
      }
      header.size = raw.size
    } else if (raw.size !== 0) fail(`is a ${raw.type} with a non-zero size`)
    if (raw.type === 'symlink') header.target = this.#symlinkTarget(path, raw.linkname, fail)
    if (raw.type === 'hardlink') header.target = this.#hardlinkTarget(path, raw.linkname, named(), fail)
    if (raw.type === 'char' || raw.type === 'block') {
      header.devMajor = raw.devMajor ?? 0
      header.devMinor = raw.devMinor ?? 0
    }
    const xattrs = this.#xattrs(raw.xattrs, fail)
    if (xattrs !== undefined) header.xattrs = xattrs

    this.#entries.set(path, raw.type === 'dir' ? 'dir' : raw.type === 'symlink' ? 'symlink' : 'other')
    this.#implyParents(path)
    return header
  }

  #admitMarker (path: string, base: string, raw: RawEntry, label: string, fail: (why: string) => never): EntryHeader | undefined {
    const dir = parentPath(path) ?? ''
    this.#checkAncestors(path, fail)
    const common = { mode: 0, uid: raw.uid, gid: raw.gid, mtime: raw.mtime, size: 0 }
    if (base === OPAQUE_MARKER) {
      const seen = this.#entries.get(dir)
      if (seen !== undefined && seen !== 'dir') fail(`marks ${JSON.stringify(dir)} opaque, but it is not a directory in this layer`)
      if (this.#opaques.has(dir)) fail('appears twice in the layer')
      this.#opaques.add(dir)
      this.#implyParents(path)
      return { path: dir, type: 'opaque', ...common }
    }
    if (base.startsWith(WHITEOUT_META_PREFIX)) {
      this.#ctx.notice(`${label} is an aufs metadata marker; skipped`)
      return undefined
    }
    const name = base.slice(WHITEOUT_PREFIX.length)
    if (name === '' || name === '.' || name === '..') fail('is a whiteout marker without a valid name to hide')
    const hidden = joinPath(dir, name)
    if (this.#whiteouts.has(hidden)) fail('appears twice in the layer')
    this.#whiteouts.add(hidden)
    this.#implyParents(path)
    return { path: hidden, type: 'whiteout', ...common }
  }

  /**
   * No ancestor of `path` may be a symlink or non-directory of this layer.
   * The walk up stops at the first ancestor admitted as a directory: its own
   * ancestors passed this check when it was admitted, and none can change
   * since (an entry at an implied directory's path that is not a directory is
   * refused, and no path is admitted twice). So a tree walked parents first
   * costs one lookup per entry, not one per ancestor.
   */
  #checkAncestors (path: string, fail: (why: string) => never): void {
    for (let p = parentPath(path); p !== undefined; p = parentPath(p)) {
      const seen = this.#entries.get(p)
      if (seen === 'dir') return
      if (seen === 'symlink') fail(`lies below ${JSON.stringify(p)}, a symlink of this layer (it would be written through the link)`)
      if (seen === 'other') fail(`lies below ${JSON.stringify(p)}, which is not a directory in this layer`)
    }
  }

  #implyParents (path: string): void {
    for (let p = parentPath(path); p !== undefined && !this.#impliedDirs.has(p); p = parentPath(p)) this.#impliedDirs.add(p)
  }

  #symlinkTarget (path: string, target: string | undefined, fail: (why: string) => never): string {
    if (target === undefined || target === '') return fail('is a symlink with an empty target')
    if (target.includes('\0')) return fail('has a symlink target containing a NUL byte')
    if (Buffer.byteLength(target) > 4096) return fail('has a symlink target longer than 4096 bytes')
    if (symlinkEscapesRoot(path, target)) return fail(`is a symlink to ${JSON.stringify(target)}, which climbs above the image root`)
    return target
  }

  #hardlinkTarget (path: string, name: string | undefined, label: string, fail: (why: string) => never): string {
    if (name === undefined || name === '') return fail('is a hardlink with an empty target')
    const v = normalizeEntryPath(name)
    if (!v.ok) return fail(`is a hardlink to ${JSON.stringify(name)}, which is refused: the target ${v.reason}`)
    if (v.wasAbsolute) this.#ctx.notice(`${label} is a hardlink with an absolute target; stored as ${JSON.stringify(v.path)}`)
    const target = v.path
    if (target === '') fail('is a hardlink to the image root')
    if (target === path) fail('is a hardlink to itself')
    const seen = this.#entries.get(target)
    if (seen === 'dir' || (seen === undefined && this.#impliedDirs.has(target))) fail(`is a hardlink to ${JSON.stringify(target)}, a directory`)
    for (let p = parentPath(target); p !== undefined; p = parentPath(p)) {
      const s = this.#entries.get(p)
      if (s !== undefined && s !== 'dir') fail(`is a hardlink to ${JSON.stringify(target)}, which lies below ${JSON.stringify(p)}, a ${s === 'symlink' ? 'symlink' : 'non-directory'} of this layer`)
    }
    return target
  }

  #checkNumbers (raw: RawEntry, fail: (why: string) => never): void {
    if (!inRange(raw.uid, MAX_ID) || !inRange(raw.gid, MAX_ID)) fail(`has an invalid uid/gid (${raw.uid}/${raw.gid})`)
    if (!Number.isSafeInteger(raw.mtime)) fail('has an invalid mtime')
    if (!inRange(raw.mode, Number.MAX_SAFE_INTEGER)) fail('has an invalid mode')
    if (!inRange(raw.size, Number.MAX_SAFE_INTEGER)) fail(`declares an absurd size (${raw.size})`)
    if (!inRange(raw.devMajor, MAX_ID) || !inRange(raw.devMinor, MAX_ID)) fail('has invalid device numbers')
  }

  #xattrs (xattrs: Map<string, Uint8Array> | undefined, fail: (why: string) => never): Record<string, string> | undefined {
    if (xattrs === undefined || xattrs.size === 0) return undefined
    const out: Record<string, string> = {}
    for (const name of [...xattrs.keys()].sort()) {
      const value = xattrs.get(name)!
      if (name.includes('\0') || Buffer.byteLength(name) > MAX_XATTR_NAME_BYTES) fail(`has an invalid xattr name ${JSON.stringify(name.slice(0, 64))}`)
      if (value.length > MAX_XATTR_VALUE_BYTES) fail(`has xattr ${JSON.stringify(name)} of ${value.length} bytes, above ${MAX_XATTR_VALUE_BYTES}`)
      out[name] = Buffer.from(value.buffer, value.byteOffset, value.length).toString('base64')
    }
    return out
  }
}

/** Absent, or a whole number in [0, max]. */
function inRange (n: number | undefined, max: number): boolean {
  return n === undefined || (Number.isSafeInteger(n) && n >= 0 && n <= max)
}
