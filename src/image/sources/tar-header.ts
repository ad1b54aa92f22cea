/**
 * Strict decoding of tar headers: 512-byte header blocks (ustar, GNU and V7),
 * PAX extended records ('x' and global 'g') and GNU long names ('L', 'K').
 *
 * Shared by the streaming framing guard in front of tar-stream
 * (tar-framing.ts) and the random-access scanner of outer archives
 * (tar-index.ts), so both read headers exactly the same way. Stricter than
 * most readers on purpose: anything two tar implementations could read
 * differently (garbage in numeric fields, malformed PAX records, data on a
 * header-only entry, GNU sparse files, non-UTF-8 names) is refused.
 *
 * Pure: no fs, network or native code. Throws TarSyntaxError (a plain Error
 * with the byte offset); callers turn it into a BadInputError naming the input.
 */

export const TAR_BLOCK_BYTES = 512
/** Largest PAX or GNU long-name record body accepted (tar-stream allows 4 MiB). */
export const MAX_EXTENSION_BYTES = 1024 * 1024
const MAX_SAFE_SIZE = Number.MAX_SAFE_INTEGER

/** A malformed header; `offset` is the position of the offending block in the tar stream. */
export class TarSyntaxError extends Error {
  readonly offset: number
  constructor (message: string, offset: number) {
    super(message)
    this.name = 'TarSyntaxError'
    this.offset = offset
  }
}

/** The typeflags layerd accepts; everything else is refused. '7' (contiguous) is read as a regular file. */
export type MemberKind = 'file' | 'hardlink' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo'

/** One archive member, with its extension headers applied. */
export interface TarMember {
  /** Offset of the member's own header block (after any extension headers). */
  offset: number
  /** Offset of its first data byte. */
  dataOffset: number
  /** Name as stored (not normalized). */
  name: string
  linkname: string
  kind: MemberKind
  /** Raw typeflag character, for messages. */
  typeflag: string
  mode: number
  uid: number
  gid: number
  /** Whole seconds since the epoch. */
  mtime: number
  /** Data bytes following the header (0 for every kind but `file`). */
  size: number
  devMajor: number
  devMinor: number
  /** Extended attributes from SCHILY.xattr.* and LIBARCHIVE.xattr.* records, raw values. */
  xattrs?: Map<string, Uint8Array>
}

export type HeaderResult =
  | { kind: 'zero' }
  | { kind: 'extension', bodyBytes: number }
  | { kind: 'member', member: TarMember }

const KINDS: Record<string, MemberKind> = {
  '0': 'file', '\0': 'file', '7': 'file', 1: 'hardlink', 2: 'symlink', 3: 'char', 4: 'block', 5: 'dir', 6: 'fifo'
}
const EXTENSIONS = new Set(['x', 'g', 'L', 'K'])
const UTF8 = new TextDecoder('utf-8', { fatal: true })
const LATIN1 = new TextDecoder('latin1')

/**
 * Header state machine: feed it each header block with `header()`, and after
 * an `extension` result the extension's body with `extensionBody()`. It keeps
 * the pending PAX/GNU records and applies them to the next member.
 */
export class TarHeaderDecoder {
  #globalPax = new Map<string, Uint8Array>()
  #pax: Map<string, Uint8Array> | undefined
  #longName: string | undefined
  #longLink: string | undefined
  #pendingType: string | undefined
  #pendingOffset = 0

  /** Decode one 512-byte header block found at `offset`. Sync; throws TarSyntaxError. */
  header (block: Uint8Array, offset: number): HeaderResult {
    if (block.length !== TAR_BLOCK_BYTES) throw new TarSyntaxError(`short header block at offset ${offset}`, offset)
    if (block.every(b => b === 0)) {
      if (this.#pax !== undefined || this.#longName !== undefined || this.#longLink !== undefined) {
        throw new TarSyntaxError(`extension header not followed by an entry before the end-of-archive block at offset ${offset}`, offset)
      }
      return { kind: 'zero' }
    }
    verifyChecksum(block, offset)
    const typeflag = String.fromCharCode(block[156]!)
    if (EXTENSIONS.has(typeflag)) {
      const bodyBytes = readNumber(block, 124, 12, 'size', offset)
      if (bodyBytes > MAX_EXTENSION_BYTES) throw new TarSyntaxError(`${describeType(typeflag)} header at offset ${offset} declares ${bodyBytes} bytes (limit ${MAX_EXTENSION_BYTES})`, offset)
      this.#pendingType = typeflag
      this.#pendingOffset = offset
      return { kind: 'extension', bodyBytes }
    }
    return { kind: 'member', member: this.#member(block, offset, typeflag) }
  }

  /** The body of the extension header announced by the last `header()` call. Sync; throws TarSyntaxError. */
  extensionBody (body: Uint8Array): void {
    const type = this.#pendingType
    const offset = this.#pendingOffset
    this.#pendingType = undefined
    if (type === undefined) throw new TarSyntaxError(`extension body without a header at offset ${offset}`, offset)
    if (type === 'L') this.#longName = decodeName(cString(body), 'GNU long name', offset)
    else if (type === 'K') this.#longLink = decodeName(cString(body), 'GNU long link name', offset)
    else {
      const records = parsePaxRecords(body, offset)
      if (type === 'g') for (const [k, v] of records) this.#globalPax.set(k, v)
      else this.#pax = records
    }
  }

  #member (block: Uint8Array, offset: number, typeflag: string): TarMember {
    const pax = new Map([...this.#globalPax, ...(this.#pax ?? [])])
    const longName = this.#longName
    const longLink = this.#longLink
    this.#pax = this.#longName = this.#longLink = undefined

    const isUstar = matches(block, 257, 'ustar\0')
    const rawName = concatName(block, isUstar)
    let kind = KINDS[typeflag]
    // Old tars mark directories with a trailing slash on a regular-file entry (tar-stream does the same).
    if (kind === 'file' && typeflag !== '7' && rawName.length > 0 && rawName[rawName.length - 1] === 0x2f) kind = 'dir'
    const paxText = (key: string): string | undefined => {
      const v = pax.get(key)
      return v === undefined ? undefined : decodeName(v, `PAX ${key}`, offset)
    }
    const name = paxText('path') ?? longName ?? decodeName(rawName, 'entry name', offset)
    const where = `entry ${JSON.stringify(name)} at offset ${offset}`
    if (typeflag === 'S' || [...pax.keys()].some(k => k.startsWith('GNU.sparse.'))) {
      throw new TarSyntaxError(`${where} is a GNU sparse file, which layerd does not read (re-create the tar without --sparse)`, offset)
    }
    if (kind === undefined) throw new TarSyntaxError(`${where} has unsupported type ${JSON.stringify(typeflag)}`, offset)
    const linkname = paxText('linkpath') ?? longLink ?? decodeName(field(block, 157, 100), 'link name', offset)

    let size = readNumber(block, 124, 12, 'size', offset)
    const paxSize = paxText('size')
    if (paxSize !== undefined) size = paxDecimal(paxSize, 'size', offset)
    if (size > MAX_SAFE_SIZE || size < 0) throw new TarSyntaxError(`${where} declares an absurd size`, offset)
    // Readers disagree on whether such data exists (Go skips it, tar-stream reads it): refuse.
    if (kind !== 'file' && size !== 0) throw new TarSyntaxError(`${where} is a ${kind} with a non-zero size (${size}), which tar readers interpret differently`, offset)

    const num = (key: string, pos: number, len: number): number => {
      const v = paxText(key)
      return v !== undefined ? paxDecimal(v, key, offset) : readNumber(block, pos, len, key, offset)
    }
    const paxMtime = paxText('mtime')
    const member: TarMember = {
      offset,
      dataOffset: offset + TAR_BLOCK_BYTES,
      name,
      linkname,
      kind,
      typeflag,
      mode: readNumber(block, 100, 8, 'mode', offset),
      uid: num('uid', 108, 8),
      gid: num('gid', 116, 8),
      mtime: paxMtime !== undefined ? paxSeconds(paxMtime, offset) : readNumber(block, 136, 12, 'mtime', offset, true),
      size,
      devMajor: isUstar || matches(block, 257, 'ustar ') ? readNumber(block, 329, 8, 'devmajor', offset) : 0,
      devMinor: isUstar || matches(block, 257, 'ustar ') ? readNumber(block, 337, 8, 'devminor', offset) : 0
    }
    const xattrs = xattrsFromPax(pax, where, offset)
    if (xattrs !== undefined) member.xattrs = xattrs
    return member
  }
}

/** Parse PAX records (`LEN KEY=VALUE\n`), keeping values as raw bytes. Sync; throws TarSyntaxError. */
export function parsePaxRecords (body: Uint8Array, offset: number): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>()
  let pos = 0
  while (pos < body.length) {
    if (body[pos] === 0) {
      // Some writers pad the record block with NULs.
      if (body.subarray(pos).every(b => b === 0)) break
    }
    const space = body.indexOf(0x20, pos)
    // The length is 1-8 ASCII digits, parsed by hand: this runs for every entry of a GNU tar --xattrs/pax archive.
    let len = space - pos >= 1 && space - pos <= 8 ? 0 : NaN
    for (let i = pos; i < space && !Number.isNaN(len); i++) {
      const d = body[i]! - 0x30
      len = d >= 0 && d <= 9 ? len * 10 + d : NaN
    }
    if (!(len > space - pos + 1) || pos + len > body.length || body[pos + len - 1] !== 0x0a) {
      throw new TarSyntaxError(`malformed PAX record in the extended header at offset ${offset}`, offset)
    }
    const record = body.subarray(space + 1, pos + len - 1)
    const eq = record.indexOf(0x3d)
    if (eq <= 0) throw new TarSyntaxError(`malformed PAX record in the extended header at offset ${offset}`, offset)
    out.set(decodeName(record.subarray(0, eq), 'PAX keyword', offset), record.subarray(eq + 1))
    pos += len
  }
  return out
}

function xattrsFromPax (pax: Map<string, Uint8Array>, where: string, offset: number): Map<string, Uint8Array> | undefined {
  let out: Map<string, Uint8Array> | undefined
  for (const [key, value] of pax) {
    let name: string
    let data: Uint8Array
    if (key.startsWith('SCHILY.xattr.')) {
      name = key.slice('SCHILY.xattr.'.length)
      data = value
    } else if (key.startsWith('LIBARCHIVE.xattr.')) {
      // libarchive URL-encodes the name and base64-encodes the value.
      try { name = decodeURIComponent(key.slice('LIBARCHIVE.xattr.'.length)) } catch {
        throw new TarSyntaxError(`${where} has a malformed LIBARCHIVE.xattr record`, offset)
      }
      data = Buffer.from(LATIN1.decode(value), 'base64')
    } else continue
    if (name === '') throw new TarSyntaxError(`${where} has an xattr record with an empty name`, offset)
    out ??= new Map()
    out.set(name, data)
  }
  return out
}

function verifyChecksum (block: Uint8Array, offset: number): void {
  let sum = 8 * 0x20
  for (let i = 0; i < 148; i++) sum += block[i]!
  for (let i = 156; i < TAR_BLOCK_BYTES; i++) sum += block[i]!
  let stored: number
  try { stored = readNumber(block, 148, 8, 'checksum', offset) } catch {
    throw new TarSyntaxError(`bad header checksum at offset ${offset} (not a tar header; is the data compressed or corrupt?)`, offset)
  }
  if (stored !== sum) throw new TarSyntaxError(`bad header checksum at offset ${offset} (not a tar header; is the data compressed or corrupt?)`, offset)
}

/**
 * A numeric header field: octal digits, optionally surrounded by spaces and
 * NULs, or GNU base-256 (high bit set). Negative values only where `signed`.
 */
function readNumber (block: Uint8Array, pos: number, len: number, what: string, offset: number, signed = false): number {
  const f = block.subarray(pos, pos + len)
  if ((f[0]! & 0x80) !== 0) {
    const negative = f[0] === 0xff
    if (!negative && f[0] !== 0x80) throw new TarSyntaxError(`invalid base-256 ${what} field in the header at offset ${offset}`, offset)
    if (negative && !signed) throw new TarSyntaxError(`negative ${what} in the header at offset ${offset}`, offset)
    let value = 0
    for (let i = 1; i < f.length; i++) {
      value = value * 256 + (negative ? 0xff - f[i]! : f[i]!)
      if (value > MAX_SAFE_SIZE) throw new TarSyntaxError(`absurd ${what} (beyond 2^53) in the header at offset ${offset}`, offset)
    }
    return negative ? -value - 1 : value
  }
  let start = 0
  let end = f.length
  while (start < end && (f[start] === 0x20 || f[start] === 0)) start++
  while (end > start && (f[end - 1] === 0x20 || f[end - 1] === 0)) end--
  let value = 0
  for (let i = start; i < end; i++) {
    const d = f[i]! - 0x30
    if (d < 0 || d > 7) throw new TarSyntaxError(`invalid ${what} field in the header at offset ${offset}`, offset)
    value = value * 8 + d
  }
  return value
}

function paxDecimal (text: string, what: string, offset: number): number {
  if (!/^[0-9]{1,16}$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new TarSyntaxError(`invalid PAX ${what} ${JSON.stringify(text.slice(0, 40))} in the extended header before offset ${offset}`, offset)
  }
  return Number(text)
}

function paxSeconds (text: string, offset: number): number {
  if (!/^-?[0-9]{1,15}(\.[0-9]*)?$/.test(text)) throw new TarSyntaxError(`invalid PAX mtime ${JSON.stringify(text.slice(0, 40))} before offset ${offset}`, offset)
  return Math.floor(Number(text))
}

function concatName (block: Uint8Array, isUstar: boolean): Uint8Array {
  const name = field(block, 0, 100)
  if (!isUstar || block[345] === 0) return name
  const prefix = field(block, 345, 155)
  return Buffer.concat([prefix, Buffer.from('/'), name])
}

function field (block: Uint8Array, pos: number, len: number): Uint8Array {
  const f = block.subarray(pos, pos + len)
  const nul = f.indexOf(0)
  return nul === -1 ? f : f.subarray(0, nul)
}

function cString (body: Uint8Array): Uint8Array {
  const nul = body.indexOf(0)
  return nul === -1 ? body : body.subarray(0, nul)
}

function decodeName (bytes: Uint8Array, what: string, offset: number): string {
  // ASCII, by far the common case, skips the (per call costly) validating decoder.
  let ascii = true
  for (let i = 0; i < bytes.length; i++) if (bytes[i]! >= 0x80) { ascii = false; break }
  if (ascii) return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('latin1')
  try { return UTF8.decode(bytes) } catch {
    throw new TarSyntaxError(`${what} in the header at offset ${offset} is not valid UTF-8`, offset)
  }
}

function matches (block: Uint8Array, pos: number, text: string): boolean {
  for (let i = 0; i < text.length; i++) if (block[pos + i] !== text.charCodeAt(i)) return false
  return true
}

function describeType (typeflag: string): string {
  return typeflag === 'x' ? 'PAX' : typeflag === 'g' ? 'PAX global' : 'GNU long name'
}

/** Does a 512-byte block look like a tar header (ustar/GNU magic and a valid checksum)? Sync, never throws. */
export function looksLikeTarHeader (block: Uint8Array): boolean {
  if (block.length < TAR_BLOCK_BYTES || !(matches(block, 257, 'ustar\0') || matches(block, 257, 'ustar '))) return false
  try { verifyChecksum(block.subarray(0, TAR_BLOCK_BYTES), 0); return true } catch { return false }
}

/** Round `n` up to a whole number of tar blocks. */
export function paddedSize (n: number): number {
  return Math.ceil(n / TAR_BLOCK_BYTES) * TAR_BLOCK_BYTES
}
