import t from 'tap'
import { execFile } from 'node:child_process'
import { readdir, readFile, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
const BYTES = 64 * 1024 ** 2
const INODES = 8192

let copies = 0
/** A fresh instance of the module (another URL): its in-memory templates start empty, as in a new process. */
async function freshModule (): Promise<typeof import('./ext4-template.js')> {
  return await import(`./ext4-template.js?copy=${++copies}`) as typeof import('./ext4-template.js')
}

/** dumpe2fs's header fields of an image, and whether e2fsck finds it clean. */
async function describeFs (file: string): Promise<{ blocks: number, inodes: number, clean: boolean }> {
  const { stdout } = await run('dumpe2fs', ['-h', file])
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(stdout)?.[1])
  const fsck = await run('e2fsck', ['-f', '-n', file]).then(() => true, () => false)
  return { blocks: field('Block count'), inodes: field('Inode count'), clean: fsck }
}

t.test('writeEmptyExt4 makes a clean ext4 of the size and inode count asked for, first by mkfs, then from the saved template', async t => {
  const dir = t.testdir()
  const templates = join(dir, 'templates')
  const first = await freshModule()
  await first.writeEmptyExt4(join(dir, 'a.img'), BYTES, INODES, templates)
  t.same(await describeFs(join(dir, 'a.img')), { blocks: BYTES / 4096, inodes: INODES, clean: true }, 'the mkfs-made disk')
  const saved = await readdir(templates)
  t.same(saved, [`ext4-${BYTES}-${INODES}.tpl`], 'the template is saved once, under its shape')

  const second = await freshModule()
  await second.writeEmptyExt4(join(dir, 'b.img'), BYTES, INODES, templates)
  t.same(await describeFs(join(dir, 'b.img')), { blocks: BYTES / 4096, inodes: INODES, clean: true }, 'a disk written from the template')
  const b = await stat(join(dir, 'b.img'))
  t.equal(b.size, BYTES, 'full apparent size')
  t.ok(b.blocks * 512 < BYTES / 16, `and sparse (${b.blocks * 512} bytes allocated)`)
})

t.test('writeEmptyExt4 remakes a template that does not parse, and keeps other shapes apart', async t => {
  const dir = t.testdir()
  const templates = join(dir, 'templates')
  await (await freshModule()).writeEmptyExt4(join(dir, 'a.img'), BYTES, INODES, templates)
  const path = join(templates, `ext4-${BYTES}-${INODES}.tpl`)
  const good = await readFile(path)
  await writeFile(path, good.subarray(0, good.length - 100)) // truncated: its runs no longer add up
  const m = await freshModule()
  await m.writeEmptyExt4(join(dir, 'b.img'), BYTES, INODES, templates)
  t.same(await describeFs(join(dir, 'b.img')), { blocks: BYTES / 4096, inodes: INODES, clean: true }, 'a clean disk despite the broken template')
  t.equal((await readFile(path)).length, good.length, 'the template was made again')
  await m.writeEmptyExt4(join(dir, 'c.img'), 2 * BYTES, INODES, templates)
  t.same(await describeFs(join(dir, 'c.img')), { blocks: 2 * BYTES / 4096, inodes: INODES, clean: true }, 'another size gets its own template')
  t.equal((await readdir(templates)).filter(n => n.endsWith('.tpl')).length, 2)
})
