/**
 * A deterministic cpio "newc" archive writer, the format the Linux kernel
 * unpacks as an initramfs (Documentation/driver-api/early-userspace/buffer-format.rst).
 *
 * Entries are written in the order given with fixed inode numbers, times and
 * owners, so the same entries give the same bytes. Pure: no fs or native code.
 *
 * May import: src/errors.ts.
 */
import { BadInputError } from '../../errors.js'

export type CpioEntry =
  | { type: 'dir', path: string, mode?: number }
  | { type: 'file', path: string, mode?: number, data: Uint8Array }
  | { type: 'symlink', path: string, target: string }
  | { type: 'chardev', path: string, mode?: number, major: number, minor: number }

const S_IFDIR = 0o040000
const S_IFREG = 0o100000
const S_IFLNK = 0o120000
const S_IFCHR = 0o020000
const TRAILER = 'TRAILER!!!'

function hex8 (n: number): string {
  if (!Number.isSafeInteger(n) || n < 0 || n > 0xffffffff) throw new BadInputError(`cpio field ${n} does not fit in 32 bits`)
  return n.toString(16).padStart(8, '0')
}

function pad4 (n: number): number { return (4 - (n % 4)) % 4 }

/** A newc header; `rdevMajor`/`rdevMinor` are a device node's numbers (devmajor/devminor, the containing device, stay 0). */
function header (ino: number, mode: number, nlink: number, size: number, rdevMajor: number, rdevMinor: number, name: string): Buffer {
  const nameBytes = Buffer.from(`${name}\0`)
  const fields = ['070701', hex8(ino), hex8(mode), hex8(0), hex8(0), hex8(nlink), hex8(0), hex8(size),
    hex8(0), hex8(0), hex8(rdevMajor), hex8(rdevMinor), hex8(nameBytes.length), hex8(0)]
  const head = Buffer.from(fields.join(''))
  return Buffer.concat([head, nameBytes, Buffer.alloc(pad4(head.length + nameBytes.length))])
}

/**
 * Encode `entries` as one newc archive ending with the TRAILER!!! record.
 * Paths are relative to the archive root ("init", "lib/modules/x.ko"); parent
 * directories must come before their children. Sync. Throws BadInputError for
 * an absolute or empty path.
 */
export function encodeCpioNewc (entries: CpioEntry[]): Buffer {
  const parts: Buffer[] = []
  let ino = 1
  for (const e of entries) {
    if (e.path === '' || e.path.startsWith('/') || e.path.split('/').includes('..')) throw new BadInputError(`cpio entry path ${JSON.stringify(e.path)} must be relative`)
    let data: Uint8Array = Buffer.alloc(0)
    let mode: number
    let major = 0
    let minor = 0
    switch (e.type) {
      case 'dir': mode = S_IFDIR | (e.mode ?? 0o755); break
      case 'file': mode = S_IFREG | (e.mode ?? 0o644); data = e.data; break
      case 'symlink': mode = S_IFLNK | 0o777; data = Buffer.from(e.target); break
      case 'chardev': mode = S_IFCHR | (e.mode ?? 0o600); major = e.major; minor = e.minor; break
    }
    const h = header(ino++, mode, e.type === 'dir' ? 2 : 1, data.length, major, minor, e.path)
    parts.push(h, Buffer.from(data.buffer, data.byteOffset, data.byteLength), Buffer.alloc(pad4(data.length)))
  }
  parts.push(header(0, 0, 1, 0, 0, 0, TRAILER))
  return Buffer.concat(parts)
}
