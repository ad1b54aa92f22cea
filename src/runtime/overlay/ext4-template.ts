/**
 * Pre-made writable layers: an empty ext4 of a given size and inode count
 * is made by mkfs.ext4 once, and every later sandbox disk of that shape is
 * written from it. A fresh sparse ext4 is almost all holes (1 GiB with
 * 131,072 inodes: 147 non-zero 4 KiB blocks in 8 runs), so writing those
 * runs into a new sparse file costs a fraction of a millisecond, where a
 * mkfs.ext4 costs a fork of the caller, an exec and about 8 CPU-ms
 * (profiled in bench/churn.ts's issue note).
 *
 * The template is kept on disk, next to the sandboxes
 * (`<dir>/ext4-<bytes>-<inodes>.tpl`, 0600 in a 0700 directory), so each
 * short-lived process (a `layerctl run`) reads ~600 KB instead of running
 * mkfs; and in memory for the rest of the process. File format: an 8-byte
 * magic, a u32 header length, a JSON header `{ bytes, inodes, runs: [[offset,
 * length], …] }`, then the runs' bytes in order. Written to a temporary name
 * and renamed, so a half-written template is never read; one that does not
 * parse is made again.
 *
 * A sandbox disk is not written from the template through the file: the
 * kernel fsyncs a loop device's backing file when the device is set up, so
 * those bytes would reach the node's disk for every sandbox (~640 KB for
 * 1 GiB). The overlay makes the file a hole ({@link createSparseFile}) and
 * has the runs written through the loop device ({@link emptyExt4Runs},
 * `mountLoop`'s `runs`), where they stay in the page cache until writeback,
 * and a disk deleted before then costs the node's disk nothing.
 *
 * Every disk written from a template has the same filesystem UUID. ext4
 * does not require UUIDs to be unique across mounts (XFS would), and
 * nothing here looks filesystems up by UUID.
 *
 * May import: src/errors.ts, src/host/, node built-ins.
 */
import { randomBytes } from 'node:crypto'
import { mkdir, open, readFile, rename, rm, writeFile, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import { runHost } from '../../host/host-command.js'

const MAGIC = Buffer.from('LDEXT4T1')
const BLOCK_BYTES = 4096
const SCAN_BYTES = 4 * 1024 ** 2

interface Ext4Template { bytes: number, inodes: number, runs: Array<[number, Buffer]> }

const loaded = new Map<string, Promise<Ext4Template>>()

/** The mkfs.ext4 arguments of every sandbox disk: no journal (scratch), no reserved blocks, lazy inode tables. */
function mkfsArgs (inodes: number, file: string): string[] {
  return ['-q', '-F', '-O', '^has_journal', '-E', 'lazy_itable_init=1,nodiscard', '-m', '0', '-b', String(BLOCK_BYTES), '-N', String(inodes), file]
}

/** An empty ext4's non-zero bytes: `[offset, bytes]` runs in offset order; the rest of the disk is zeros. */
export type Ext4Runs = ReadonlyArray<readonly [number, Buffer]>

/**
 * The non-zero runs of an empty ext4 of `bytes` with `inodes` inodes, as
 * mkfs.ext4 makes it, from the template in `templateDir` (made there on
 * first use, by mkfs into `scratchFile`, which is then left holding that
 * disk). Async. Throws HostCommandError when mkfs fails, and fs errors for
 * `scratchFile`. The buffers are shared by every caller: do not write to them.
 */
export async function emptyExt4Runs (bytes: number, inodes: number, templateDir: string, scratchFile: string): Promise<Ext4Runs> {
  const key = `ext4-${bytes}-${inodes}`
  let template = loaded.get(key)
  if (template === undefined) {
    template = loadOrMake(join(templateDir, `${key}.tpl`), scratchFile, bytes, inodes)
    loaded.set(key, template)
    template.catch(() => loaded.delete(key)) // a failure is not remembered: the next sandbox tries again
  }
  return (await template).runs
}

/**
 * Make `file` an empty ext4 of `bytes` with `inodes` inodes, as mkfs.ext4
 * would, from the template in `templateDir` ({@link emptyExt4Runs}). Async.
 * Throws HostCommandError when mkfs fails, and fs errors for `file`.
 */
export async function writeEmptyExt4 (file: string, bytes: number, inodes: number, templateDir: string): Promise<void> {
  const runs = await emptyExt4Runs(bytes, inodes, templateDir, file)
  const fh = await createSparseFile(file, bytes)
  try {
    for (const [offset, data] of runs) await fh.write(data, 0, data.length, offset)
  } finally { await fh.close() }
}

/**
 * `file` made anew (whatever was there is removed first) as a hole of
 * `bytes`, mode 0600, open for writing. Async; the caller closes it.
 */
export async function createSparseFile (file: string, bytes: number): Promise<FileHandle> {
  await rm(file, { force: true })
  const fh = await open(file, 'wx', 0o600)
  try {
    await fh.truncate(bytes)
  } catch (err) {
    await fh.close()
    throw err
  }
  return fh
}

async function loadOrMake (path: string, file: string, bytes: number, inodes: number): Promise<Ext4Template> {
  const existing = parseTemplate(await readFile(path).catch(() => undefined), bytes, inodes)
  if (existing !== undefined) return existing
  const image = await open(file, 'w')
  try { await image.truncate(bytes) } finally { await image.close() }
  await runHost('mkfs.ext4', mkfsArgs(inodes, file), { what: `Cannot make the writable layer ${file}: mkfs.ext4` })
  const t: Ext4Template = { bytes, inodes, runs: await dataRuns(file, bytes) }
  await saveTemplate(path, t).catch(() => {}) // without the file, the next process runs mkfs again: slower, not wrong
  return t
}

/** The file's non-zero 4 KiB blocks, merged into runs. Reads it whole (holes read fast). */
async function dataRuns (file: string, bytes: number): Promise<Array<[number, Buffer]>> {
  const runs: Array<[number, Buffer[]]> = []
  const zero = Buffer.alloc(BLOCK_BYTES)
  const buf = Buffer.alloc(SCAN_BYTES)
  const fh = await open(file, 'r')
  try {
    for (let base = 0; base < bytes; base += SCAN_BYTES) {
      const { bytesRead } = await fh.read(buf, 0, Math.min(SCAN_BYTES, bytes - base), base)
      if (bytesRead === 0) break
      for (let o = 0; o < bytesRead; o += BLOCK_BYTES) {
        const block = buf.subarray(o, Math.min(o + BLOCK_BYTES, bytesRead))
        if (block.equals(zero.subarray(0, block.length))) continue
        const last = runs[runs.length - 1]
        if (last !== undefined && last[0] + last[1].length * BLOCK_BYTES === base + o) last[1].push(Buffer.from(block))
        else runs.push([base + o, [Buffer.from(block)]])
      }
    }
  } finally { await fh.close() }
  return runs.map(([offset, blocks]) => [offset, Buffer.concat(blocks)])
}

async function saveTemplate (path: string, t: Ext4Template): Promise<void> {
  const header = Buffer.from(JSON.stringify({ bytes: t.bytes, inodes: t.inodes, runs: t.runs.map(([o, d]) => [o, d.length]) }))
  const len = Buffer.alloc(4)
  len.writeUInt32BE(header.length)
  const dir = join(path, '..')
  await mkdir(dir, { recursive: true, mode: 0o700 })
  const tmp = `${path}.${randomBytes(4).toString('hex')}.tmp`
  try {
    await writeFile(tmp, Buffer.concat([MAGIC, len, header, ...t.runs.map(([, d]) => d)]), { mode: 0o600 })
    await rename(tmp, path)
  } catch (err) {
    await rm(tmp, { force: true })
    throw err
  }
}

/** The template in `data`, or undefined when it is missing, of another shape, or does not parse. Sync. */
function parseTemplate (data: Buffer | undefined, bytes: number, inodes: number): Ext4Template | undefined {
  if (data === undefined || data.length < 12 || !data.subarray(0, 8).equals(MAGIC)) return undefined
  const headerEnd = 12 + data.readUInt32BE(8)
  try {
    const h = JSON.parse(data.subarray(12, headerEnd).toString()) as { bytes?: unknown, inodes?: unknown, runs?: unknown }
    if (h.bytes !== bytes || h.inodes !== inodes || !Array.isArray(h.runs)) return undefined
    const runs: Array<[number, Buffer]> = []
    let at = headerEnd
    for (const r of h.runs as unknown[]) {
      if (!Array.isArray(r) || !Number.isSafeInteger(r[0]) || !Number.isSafeInteger(r[1])) return undefined
      const [offset, length] = r as [number, number]
      if (offset < 0 || length <= 0 || offset + length > bytes || at + length > data.length) return undefined
      runs.push([offset, data.subarray(at, at + length)])
      at += length
    }
    return at === data.length ? { bytes, inodes, runs } : undefined
  } catch { return undefined }
}
