/**
 * Turns a compressed x86 kernel (bzImage, Debian's /boot/vmlinuz-*) into the
 * uncompressed ELF `vmlinux` inside it, as the kernel's own
 * scripts/extract-vmlinux does.
 *
 * Why: Firecracker boots only an ELF vmlinux on x86_64, and QEMU boots an
 * ELF with a PVH note (Debian: CONFIG_PVH=y) directly, which skips the
 * guest's own decompression of the kernel: seconds under TCG.
 *
 * The payload is located from the bzImage setup header (boot protocol
 * 2.08+: payload_offset/payload_length) and decompressed with the xz, zstd,
 * gzip or lz4 program it was made with.
 *
 * May import: src/errors.ts, src/host/, node built-ins.
 */
import { BadInputError, LimitExceededError, UnsupportedError } from '../../errors.js'
import { collectHost } from '../../host/host-command.js'

const SETUP_SECTS_OFFSET = 0x1f1
const HEADER_MAGIC_OFFSET = 0x202
const PROTOCOL_VERSION_OFFSET = 0x206
const PAYLOAD_OFFSET_OFFSET = 0x248
const PAYLOAD_LENGTH_OFFSET = 0x24c
const MIN_PROTOCOL_WITH_PAYLOAD = 0x0208
const ELF_MAGIC = 0x7f454c46
/** A decompressed kernel larger than this is not a kernel. */
const MAX_VMLINUX_BYTES = 512 * 1024 * 1024

interface Codec { magic: number[], tool: string, args: string[] }
const CODECS: Codec[] = [
  { magic: [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], tool: 'xz', args: ['-dc', '--single-stream'] },
  { magic: [0x28, 0xb5, 0x2f, 0xfd], tool: 'zstd', args: ['-dc'] },
  { magic: [0x1f, 0x8b], tool: 'gzip', args: ['-dc'] },
  { magic: [0x02, 0x21, 0x4c, 0x18], tool: 'lz4', args: ['-dc'] }
]

/** True when `bytes` start with the ELF magic. */
export function isElf (bytes: Uint8Array): boolean {
  return bytes.length >= 4 && Buffer.from(bytes.buffer, bytes.byteOffset, 4).readUInt32BE(0) === ELF_MAGIC
}

async function decompress (codec: Codec, input: Buffer): Promise<Buffer> {
  let r
  try {
    r = await collectHost(codec.tool, codec.args, { input, timeoutMs: Infinity, maxStdoutBytes: MAX_VMLINUX_BYTES, missing: `${codec.tool} is needed to extract vmlinux from this kernel` })
  } catch (err) {
    if (err instanceof LimitExceededError) throw new BadInputError(`kernel payload decompresses to more than ${MAX_VMLINUX_BYTES} bytes`, { cause: err })
    throw err
  }
  // gzip and lz4 complain about the 4-byte size the kernel build appends; what they produced is still the kernel.
  if (r.code === 0 || isElf(r.stdout)) return r.stdout
  throw new BadInputError(`kernel payload does not decompress with ${codec.tool}: ${r.stderr.slice(-300)}`)
}

/**
 * The ELF vmlinux inside `kernel` (bzImage bytes), or `kernel` itself when it
 * already is an ELF. Async. Throws BadInputError for something that is not a
 * bzImage with a payload this knows, UnsupportedError when the decompressor
 * program is missing.
 */
export async function extractVmlinux (kernel: Buffer, source: string): Promise<Buffer> {
  if (isElf(kernel)) return kernel
  if (kernel.length < 0x260 || kernel.toString('latin1', HEADER_MAGIC_OFFSET, HEADER_MAGIC_OFFSET + 4) !== 'HdrS') {
    throw new BadInputError(`${source} is neither an ELF kernel nor a bzImage`)
  }
  const protocol = kernel.readUInt16LE(PROTOCOL_VERSION_OFFSET)
  if (protocol < MIN_PROTOCOL_WITH_PAYLOAD) throw new BadInputError(`${source}: boot protocol ${protocol.toString(16)} has no payload fields`)
  const setupSects = kernel[SETUP_SECTS_OFFSET] === 0 ? 4 : kernel[SETUP_SECTS_OFFSET]!
  const start = (setupSects + 1) * 512 + kernel.readUInt32LE(PAYLOAD_OFFSET_OFFSET)
  const length = kernel.readUInt32LE(PAYLOAD_LENGTH_OFFSET)
  if (start + length > kernel.length || length === 0) throw new BadInputError(`${source}: payload ${start}+${length} lies outside the file`)
  const payload = kernel.subarray(start, start + length)
  const codec = CODECS.find(c => c.magic.every((b, i) => payload[i] === b))
  if (codec === undefined) throw new UnsupportedError(`${source}: kernel payload compression ${payload.subarray(0, 6).toString('hex')} is not one of xz, zstd, gzip, lz4`)
  const vmlinux = await decompress(codec, payload)
  if (!isElf(vmlinux)) throw new BadInputError(`${source}: decompressed payload is not an ELF file`)
  return vmlinux
}
