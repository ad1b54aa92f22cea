/**
 * Picks the kernel modules a layerd guest needs out of a kernel's module
 * tree (`lib/modules/<release>`, from a Debian linux-image package or from
 * an image's own /lib/modules), with their dependencies, in load order.
 *
 * Dependencies come from each module's own `.modinfo` ELF section
 * (`depends=`), so neither modules.dep nor kmod is needed: Debian's package
 * ships no modules.dep (depmod runs at install) and this host has no kmod.
 * Compressed modules (.ko.xz, .ko.zst, .ko.gz) are decompressed with the
 * xz/zstd/gzip programs. Modules listed in modules.builtin are skipped.
 *
 * May import: src/errors.ts, src/host/, node built-ins.
 */
import { readdir, readFile } from 'node:fs/promises'
import { basename, join } from 'node:path'
import { BadInputError, NotFoundError, UnsupportedError } from '../../errors.js'
import { runHostBytes } from '../../host/host-command.js'

/**
 * What the guest needs: virtio transports (mmio for microvm/Firecracker, pci
 * for the pc machine), the block and serial devices, ext4 with the crc32c
 * its metadata checksums use, overlayfs and vsock for the Firecracker path.
 */
export const GUEST_MODULES_REQUIRED = ['virtio_mmio', 'virtio_pci', 'virtio_blk', 'virtio_console', 'crc32c_generic', 'ext4']
/** Loaded when present: the Firecracker path's channel (vsock) and copy-on-write root (overlay). */
export const GUEST_MODULES_OPTIONAL = ['overlay', 'vmw_vsock_virtio_transport']

const MODULE_SUFFIXES = ['.ko', '.ko.xz', '.ko.zst', '.ko.gz']
const MAX_MODULE_BYTES = 64 * 1024 * 1024

export interface GuestModule {
  /** Canonical name (dashes as underscores). */
  name: string
  /** The module file it came from. */
  path: string
  /** Uncompressed .ko bytes. */
  bytes: Buffer
}

function canonical (name: string): string { return name.replace(/-/g, '_') }

function moduleNameOf (file: string): string | undefined {
  const suffix = MODULE_SUFFIXES.find(s => file.endsWith(s))
  return suffix === undefined ? undefined : canonical(basename(file).slice(0, -suffix.length))
}

async function walkModules (dir: string, found: Map<string, string>): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name)
    if (e.isDirectory()) await walkModules(p, found)
    else {
      const name = moduleNameOf(e.name)
      if (name !== undefined && !found.has(name)) found.set(name, p)
    }
  }
}

async function builtinNames (modulesDir: string): Promise<Set<string>> {
  try {
    const text = await readFile(join(modulesDir, 'modules.builtin'), 'utf8')
    return new Set(text.split('\n').filter(l => l !== '').map(l => moduleNameOf(l)).filter((n): n is string => n !== undefined))
  } catch {
    return new Set()
  }
}

async function decompressedModule (path: string): Promise<Buffer> {
  const tool = path.endsWith('.xz') ? 'xz' : path.endsWith('.zst') ? 'zstd' : path.endsWith('.gz') ? 'gzip' : undefined
  if (tool === undefined) return await readFile(path)
  try {
    return await runHostBytes(tool, ['-dc', path], { timeoutMs: Infinity, maxStdoutBytes: MAX_MODULE_BYTES, missing: `${tool} is needed to decompress kernel module ${path}` })
  } catch (err) {
    if (err instanceof UnsupportedError) throw err
    throw new BadInputError(`kernel module ${path} does not decompress with ${tool}`, { cause: err })
  }
}

/**
 * The `key=value` strings of an ELF64 module's `.modinfo` section. Sync.
 * Throws BadInputError when `bytes` is not an ELF64 file with that section.
 */
export function readModinfo (bytes: Buffer, source: string): Map<string, string[]> {
  const fail = (why: string): never => { throw new BadInputError(`kernel module ${source}: ${why}`) }
  if (bytes.length < 64 || bytes.readUInt32BE(0) !== 0x7f454c46 || bytes[4] !== 2 || bytes[5] !== 1) fail('not a little-endian ELF64 file')
  const shoff = Number(bytes.readBigUInt64LE(0x28))
  const shentsize = bytes.readUInt16LE(0x3a)
  const shnum = bytes.readUInt16LE(0x3c)
  const shstrndx = bytes.readUInt16LE(0x3e)
  const section = (i: number): { name: number, offset: number, size: number } => {
    const at = shoff + i * shentsize
    if (at + 64 > bytes.length) fail('section header out of range')
    return { name: bytes.readUInt32LE(at), offset: Number(bytes.readBigUInt64LE(at + 0x18)), size: Number(bytes.readBigUInt64LE(at + 0x20)) }
  }
  const strtab = section(shstrndx)
  for (let i = 0; i < shnum; i++) {
    const s = section(i)
    const nameStart = strtab.offset + s.name
    const nameEnd = bytes.indexOf(0, nameStart)
    if (bytes.toString('latin1', nameStart, nameEnd) !== '.modinfo') continue
    if (s.offset + s.size > bytes.length) fail('.modinfo out of range')
    const info = new Map<string, string[]>()
    for (const kv of bytes.toString('utf8', s.offset, s.offset + s.size).split('\0')) {
      const eq = kv.indexOf('=')
      if (eq <= 0) continue
      const k = kv.slice(0, eq)
      info.set(k, [...(info.get(k) ?? []), kv.slice(eq + 1)])
    }
    return info
  }
  return fail('no .modinfo section')
}

/**
 * The modules `wanted` (and `optional`, when present) need from the tree at
 * `modulesDir`, dependencies first. Async. Throws NotFoundError naming a
 * required module (or a dependency) that is neither a file nor built in.
 */
export async function resolveGuestModules (modulesDir: string, wanted = GUEST_MODULES_REQUIRED, optional = GUEST_MODULES_OPTIONAL): Promise<GuestModule[]> {
  const files = new Map<string, string>()
  await walkModules(join(modulesDir, 'kernel'), files).catch(err => {
    throw new NotFoundError(`no kernel modules under ${modulesDir}/kernel`, { cause: err })
  })
  const builtin = await builtinNames(modulesDir)
  const ordered: GuestModule[] = []
  const state = new Map<string, 'visiting' | 'done'>()
  const visit = async (name: string, required: boolean, chain: string[]): Promise<void> => {
    const n = canonical(name)
    if (state.get(n) === 'done' || builtin.has(n)) return
    if (state.get(n) === 'visiting') throw new BadInputError(`kernel modules in ${modulesDir} depend on each other in a cycle: ${[...chain, n].join(' -> ')}`)
    const file = files.get(n)
    if (file === undefined) {
      if (!required) return
      throw new NotFoundError(`kernel module ${n}${chain.length > 0 ? ` (needed by ${chain.join(' -> ')})` : ''} is not in ${modulesDir} and not built in`)
    }
    state.set(n, 'visiting')
    const bytes = await decompressedModule(file)
    const depends = (readModinfo(bytes, file).get('depends') ?? []).flatMap(d => d.split(',')).filter(d => d !== '')
    for (const d of depends) await visit(d, true, [...chain, n])
    state.set(n, 'done')
    ordered.push({ name: n, path: file, bytes })
  }
  for (const m of wanted) await visit(m, true, [])
  for (const m of optional) await visit(m, false, [])
  return ordered
}
