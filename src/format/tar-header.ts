/**
 * Writing tar headers: POSIX ustar plus pax extended records, binary-safe.
 *
 * Export writes its own headers instead of tar-stream's pack because
 * tar-stream builds pax records as JS strings, which mangles binary xattr
 * values (security.capability is binary). Here every record is bytes.
 *
 * pax is used for what ustar cannot hold: names over 100 bytes or not ASCII,
 * sizes of 8 GiB and more, ids above 0o7777777, mtimes outside 0..8^11, and
 * xattrs (`SCHILY.xattr.NAME`, the GNU tar and bsdtar convention).
 *
 * Pure: no fs, network or native code.
 */

export const TAR_BLOCK_BYTES = 512

export type TarType = 'file' | 'hardlink' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo'

export interface TarHeader {
  name: string
  type: TarType
  mode: number
  uid: number
  gid: number
  /** Seconds since the epoch. */
  mtime: number
  size: number
  linkname?: string
  devMajor?: number
  devMinor?: number
  /** Extended attributes: name → raw value bytes. */
  xattrs?: Map<string, Uint8Array>
}

const TYPEFLAGS: Record<TarType, string> = { file: '0', hardlink: '1', symlink: '2', char: '3', block: '4', dir: '5', fifo: '6' }
const MAX_OCTAL_7 = 0o7777777
const MAX_OCTAL_11 = 0o77777777777

/** The header block(s) for one entry: an optional pax header + its records, then the ustar header. */
export function encodeTarHeader (h: TarHeader): Buffer {
  const records: Buffer[] = []
  const name = h.type === 'dir' && !h.name.endsWith('/') ? `${h.name}/` : h.name
  if (!fitsUstar(name, 100)) records.push(paxRecord('path', Buffer.from(name)))
  if (h.linkname !== undefined && !fitsUstar(h.linkname, 100)) records.push(paxRecord('linkpath', Buffer.from(h.linkname)))
  if (h.size > MAX_OCTAL_11) records.push(paxRecord('size', Buffer.from(String(h.size))))
  if (h.uid > MAX_OCTAL_7) records.push(paxRecord('uid', Buffer.from(String(h.uid))))
  if (h.gid > MAX_OCTAL_7) records.push(paxRecord('gid', Buffer.from(String(h.gid))))
  if (h.mtime < 0 || h.mtime > MAX_OCTAL_11) records.push(paxRecord('mtime', Buffer.from(String(h.mtime))))
  for (const [key, value] of [...(h.xattrs ?? new Map())].sort(([a], [b]) => (a < b ? -1 : 1))) {
    records.push(paxRecord(`SCHILY.xattr.${key}`, value))
  }
  const ustar = ustarBlock(h, name)
  if (records.length === 0) return ustar
  const body = Buffer.concat(records)
  const paxHead = ustarBlock({ ...h, type: 'file', size: body.length, linkname: undefined, xattrs: undefined }, 'PaxHeader', 'x')
  return Buffer.concat([paxHead, body, Buffer.alloc(padding(body.length)), ustar])
}

/** Zero bytes needed after `size` bytes of entry data to reach a block boundary. */
export function padding (size: number): number {
  return (TAR_BLOCK_BYTES - (size % TAR_BLOCK_BYTES)) % TAR_BLOCK_BYTES
}

/** The two zero blocks that end an archive. */
export const TAR_END = Buffer.alloc(2 * TAR_BLOCK_BYTES)

function fitsUstar (s: string, max: number): boolean {
  return Buffer.byteLength(s) <= max && /^[\x20-\x7e]*$/.test(s)
}

/** One pax record: "<len> <key>=<value>\n", where len counts the whole record in bytes. */
function paxRecord (key: string, value: Uint8Array): Buffer {
  const rest = Buffer.byteLength(key) + value.length + 3 // ' ', '=', '\n'
  let len = rest + String(rest).length
  if (String(len).length !== String(rest).length) len = rest + String(len).length
  return Buffer.concat([Buffer.from(`${len} ${key}=`), value, Buffer.from('\n')])
}

function ustarBlock (h: TarHeader, name: string, typeflag = TYPEFLAGS[h.type]): Buffer {
  const b = Buffer.alloc(TAR_BLOCK_BYTES)
  writeString(b, 0, 100, name)
  writeOctal(b, 100, 8, h.mode & 0o7777)
  writeOctal(b, 108, 8, Math.min(h.uid, MAX_OCTAL_7))
  writeOctal(b, 116, 8, Math.min(h.gid, MAX_OCTAL_7))
  writeOctal(b, 124, 12, h.type === 'file' || typeflag === 'x' ? Math.min(h.size, MAX_OCTAL_11) : 0)
  writeOctal(b, 136, 12, Math.max(0, Math.min(h.mtime, MAX_OCTAL_11)))
  b.fill(0x20, 148, 156) // checksum field counts as spaces
  b.write(typeflag, 156, 'latin1')
  writeString(b, 157, 100, h.linkname ?? '')
  b.write('ustar\x0000', 257, 'latin1')
  writeOctal(b, 329, 8, h.devMajor ?? 0)
  writeOctal(b, 337, 8, h.devMinor ?? 0)
  let sum = 0
  for (let i = 0; i < TAR_BLOCK_BYTES; i++) sum += b[i]!
  writeOctal(b, 148, 7, sum)
  b[155] = 0x20
  return b
}

/** Writes what fits; a longer value is carried by a pax record (the ustar field is then only a fallback for old readers). */
function writeString (b: Buffer, offset: number, size: number, s: string): void {
  const bytes = Buffer.from(s)
  bytes.copy(b, offset, 0, Math.min(size, bytes.length))
}

function writeOctal (b: Buffer, offset: number, size: number, n: number): void {
  b.write(n.toString(8).padStart(size - 1, '0') + '\0', offset, size, 'latin1')
}
