/**
 * buildBlockView on the real Debian fixture trees: determinism (same bytes
 * from a copy of the tree made elsewhere, at another time) and fidelity
 * (a read-only loop mount of the result equals the source tree, special
 * files included).
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { chmod, link, mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { compareTrees, snapshotTree } from '../../fixtures/tree-compare.js'
import { parseRef } from '../format/ref.js'
import { pushImage } from '../image/push.js'
import { openMemoryNodeDb } from '../state/node-db.js'
import { openStore } from '../store/open-store.js'
import { BLOCK_VIEW_LABEL, buildBlockView, derivedUuid, readBlockViewSuperblock } from './block-view-builder.js'

const run = promisify(execFile)
const MIB = 1024 * 1024

async function sha256 (path: string): Promise<string> {
  const h = createHash('sha256')
  for await (const c of createReadStream(path)) h.update(c as Buffer)
  return h.digest('hex')
}

async function withLoopMount<T> (image: string, fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = `${image}.mnt`
  await mkdir(dir)
  await run('mount', ['-o', 'ro,loop', image, dir])
  try {
    return await fn(dir)
  } finally {
    await run('umount', [dir])
  }
}

const images = await ensureDebianImages()

t.test('buildBlockView() gives the same bytes for a copy of the tree made elsewhere', async t => {
  const base = images.images.base.rootfs
  const dir = t.testdir({})
  const copy = join(dir, 'copy')
  await run('cp', ['-a', base, copy]) // new inodes, new ctimes, another directory order on disk
  const a = await buildBlockView(base, { uuidSeed: 'sha256:seed', out: join(dir, 'a.raw') })
  const b = await buildBlockView(copy, { uuidSeed: 'sha256:seed', out: join(dir, 'b.raw') })
  t.equal(await sha256(a.path), await sha256(b.path), 'same sha256')
  t.equal(a.sizeBytes, b.sizeBytes)

  const sb = await readBlockViewSuperblock(a.path)
  t.equal(sb.uuid, derivedUuid('sha256:seed', 'uuid'))
  t.equal(sb.volumeName, BLOCK_VIEW_LABEL)
  t.equal(sb.hasJournal, false)
  t.ok(sb.freeBytes >= 4 * MIB && sb.freeBytes < 16 * MIB, `the filesystem is nearly full: ${(sb.freeBytes / MIB).toFixed(1)} MiB free (VMs grow it to their quota)`)
  t.ok(sb.freeInodes >= 1024, 'spare inodes')
  const roomy = await buildBlockView(base, { uuidSeed: 'sha256:seed', out: join(dir, 'roomy.raw'), headroomBytes: 256 * MIB })
  t.ok(roomy.freeBytes >= 256 * MIB, 'more headroom on request')
  const st = await stat(roomy.path)
  t.ok(st.blocks * 512 < st.size * 0.6, `… and the file is sparse (${(st.blocks * 512 / MIB).toFixed(0)} MiB allocated of ${(st.size / MIB).toFixed(0)} MiB)`)
  await run('e2fsck', ['-fn', a.path]).then(() => t.pass('e2fsck -fn finds nothing to fix'), (err: Error) => t.fail(`e2fsck: ${err.message}`))
})

t.test('buildBlockView() of a layerd mount = of its tree', async t => {
  const base = images.images.base
  const dir = t.testdir({})
  const store = `file://${join(dir, 'store')}`
  const s = openStore(store)
  await pushImage(base.dockerArchive, parseRef('deb/base:v1'), { store: s, db: openMemoryNodeDb() })
  await s.close()
  const home = await mkdtemp('/var/tmp/layerd-bv-') // a short path: layerd's socket must fit in 107 bytes
  const node = layerdNode(home, { store })
  await node.startDaemon()
  const mnt = join(home, 'mnt')
  try {
    const m = await node.layerctl('mount', 'deb/base:v1', mnt)
    t.equal(m.code, 0, m.stderr)
    const fromMount = await buildBlockView(mnt, { uuidSeed: base.manifestDigest, out: join(dir, 'mount.raw') })
    const fromDir = await buildBlockView(base.rootfs, { uuidSeed: base.manifestDigest, out: join(dir, 'dir.raw') })
    t.equal(await sha256(fromMount.path), await sha256(fromDir.path), 'same sha256 from the lazy mount and from the directory')
  } finally {
    await node.layerctl('umount', mnt)
    await node.stopDaemon()
    await rm(home, { recursive: true, force: true })
  }
})

t.test('buildBlockView() keeps modes, owners, xattrs, hardlinks, devices, fifos, symlinks and holes', async t => {
  const dir = t.testdir({})
  const tree = join(dir, 'tree')
  await mkdir(join(tree, 'dev'), { recursive: true })
  await mkdir(join(tree, 'tmp'), { mode: 0o777 })
  await chmod(join(tree, 'tmp'), 0o1777)
  await writeFile(join(tree, 'suid'), '#!/bin/sh\n')
  await chmod(join(tree, 'suid'), 0o4755)
  await writeFile(join(tree, 'owned'), 'x')
  await run('chown', ['1234:5678', join(tree, 'owned')])
  await writeFile(join(tree, 'capped'), 'cap')
  await run('setfattr', ['-n', 'security.capability', '-v', '0sAQAAAgAgAAAAAAAAAAAAAAAAAAA=', join(tree, 'capped')])
  await run('setfattr', ['-n', 'user.note', '-v', 'kept', join(tree, 'capped')])
  await link(join(tree, 'capped'), join(tree, 'capped-link'))
  await run('mknod', [join(tree, 'dev/null'), 'c', '1', '3'])
  await run('mknod', [join(tree, 'dev/loop9'), 'b', '7', '9'])
  await run('mkfifo', [join(tree, 'fifo')])
  await symlink('suid', join(tree, 'short-link'))
  await symlink(`/${'long/'.repeat(30)}target`, join(tree, 'long-link'))
  await run('truncate', ['-s', '8M', join(tree, 'sparse')])
  await writeFile(join(tree, 'sparse'), 'end', { flag: 'r+' })
  const built = await buildBlockView(tree, { uuidSeed: 'special', out: join(dir, 'special.raw') })
  await withLoopMount(built.path, async mnt => {
    const diffs = compareTrees(await snapshotTree(tree), await snapshotTree(mnt), { skip: p => p === 'lost+found', labels: ['tree', 'block view'] })
    t.same(diffs, [], 'the mounted block view equals the tree')
    const holes = await stat(join(mnt, 'sparse'))
    t.ok(holes.blocks * 512 < MIB, 'a sparse file stays sparse')
  })

  // The Debian python-v2 image: capabilities, a hardlink pair and user xattrs among 8,300 entries.
  const python = images.images['python-v2'].rootfs
  const pv = await buildBlockView(python, { uuidSeed: 'python-v2', out: join(dir, 'python.raw') })
  await withLoopMount(pv.path, async mnt => {
    const diffs = compareTrees(await snapshotTree(python), await snapshotTree(mnt), { skip: p => p === 'lost+found', labels: ['tree', 'block view'] })
    t.same(diffs, [], `python-v2's ${pv.tree.inodes} inodes are all there, equal`)
  })
})

t.test('buildBlockView() refuses a size the tree does not fit, and honours a given size', async t => {
  const dir = t.testdir({})
  const base = images.images.base.rootfs
  await t.rejects(buildBlockView(base, { uuidSeed: 's', out: join(dir, 'small.raw'), sizeBytes: 32 * MIB }), { code: 'ERR_LIMIT' })
  const sized = await buildBlockView(base, { uuidSeed: 's', out: join(dir, 'sized.raw'), sizeBytes: 512 * MIB })
  t.equal(sized.sizeBytes, 512 * MIB)
  await t.rejects(buildBlockView(join(dir, 'no-such-dir'), { uuidSeed: 's' }), { code: 'ERR_NOT_FOUND' })
})
