import t from 'tap'
import { mkdir, readFile, rm, rmdir, symlink, unlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { lgetxattr } from '../../native.js'
import type { LayerEntry } from './image-source.js'
import { mountSandboxOverlay, removeSandboxOverlay } from '../../runtime/overlay/sandbox-overlay.js'
import { UpperLayerSource } from './upper-layer-source.js'

async function collect (src: UpperLayerSource): Promise<Array<{ entry: LayerEntry, content?: string }>> {
  const out = []
  for await (const entry of src.entries()) {
    let content: string | undefined
    if (entry.body !== undefined) {
      const parts: Buffer[] = []
      for await (const c of entry.body) parts.push(Buffer.from(c))
      content = Buffer.concat(parts).toString()
    }
    out.push({ entry, content })
  }
  return out
}

t.test('UpperLayerSource.entries() turns a real overlay upper into entries, whiteouts and opaque markers', async t => {
  // Registered before t.testdir(): teardowns run first-in first-out, and the
  // mounts must be gone before tap removes the directory.
  let stateDir = ''
  t.teardown(async () => { if (stateDir !== '') await removeSandboxOverlay(stateDir) })
  const dir = t.testdir({})
  const lower = join(dir, 'lower')
  await mkdir(join(lower, 'etc'), { recursive: true })
  await mkdir(join(lower, 'bin'))
  await mkdir(join(lower, 'data', 'old'), { recursive: true })
  await writeFile(join(lower, 'bin', 'ls'), 'ls binary')
  await writeFile(join(lower, 'etc', 'keep'), 'kept')
  await writeFile(join(lower, 'data', 'old', 'a'), 'A')
  stateDir = join(dir, 'sb')
  const o = await mountSandboxOverlay({ lower, stateDir, diskBytes: 32 * 1024 ** 2, quota: 'tmpfs' })

  // Changes made through the merged view, as a sandbox would.
  await unlink(join(o.merged, 'bin', 'ls'))
  await writeFile(join(o.merged, 'etc', 'x'), 'new file')
  await rm(join(o.merged, 'data', 'old'), { recursive: true })
  await rmdir(join(o.merged, 'data')).catch(() => {})
  await mkdir(join(o.merged, 'data'))
  await writeFile(join(o.merged, 'data', 'fresh'), 'fresh')
  await symlink('/etc/x', join(o.merged, 'link'))
  t.equal(await readFile(join(lower, 'bin', 'ls'), 'utf8'), 'ls binary', 'the lower is untouched')
  t.equal(lgetxattr(join(o.upperDir, 'data'), 'trusted.overlay.opaque').toString(), 'y', 'the kernel marked data/ opaque')

  const entries = await collect(new UpperLayerSource(o.upperDir))
  const byPath = (p: string, type?: string): LayerEntry | undefined => entries.find(e => e.entry.header.path === p && (type === undefined || e.entry.header.type === type))?.entry
  t.equal(byPath('bin/ls')?.header.type, 'whiteout', 'a deleted lower file becomes a whiteout')
  t.equal(entries.find(e => e.entry.header.path === 'etc/x')?.content, 'new file')
  t.equal(byPath('data', 'dir')?.header.type, 'dir')
  t.ok(byPath('data', 'opaque'), 'a replaced directory gets an opaque marker')
  const dataIdx = entries.findIndex(e => e.entry.header.path === 'data' && e.entry.header.type === 'opaque')
  const freshIdx = entries.findIndex(e => e.entry.header.path === 'data/fresh')
  t.ok(dataIdx >= 0 && dataIdx < freshIdx, 'the opaque marker precedes the directory\'s new children')
  t.equal(byPath('link')?.header.target, '/etc/x')
  t.notOk(byPath('etc/keep'), 'unchanged lower files are not in the layer')
  t.notOk(byPath('data/old/a'), 'nothing of the hidden lower directory leaks in')
  for (const { entry } of entries) {
    const names = Object.keys(entry.header.xattrs ?? {})
    t.notOk(names.some(n => n.startsWith('trusted.overlay.') || n.startsWith('user.overlay.')), `no overlay xattrs on ${entry.header.path}`)
    t.not(entry.header.type, 'char', `no raw whiteout devices (${entry.header.path})`)
  }
})
