import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { mkdir, readFile, statfs, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { unmountAllUnder } from '../../host/mount-table.js'
import { MS_NOATIME, nativeMounts } from '../../native.js'
import { mountSandboxOverlay, overlayPaths, removeSandboxOverlay, unmountSandboxOverlay } from './sandbox-overlay.js'

const run = promisify(execFile)
const GIB = 1024 ** 3
const SANDBOXES = 8
/** Before the disk's bytes went through the loop device, each sandbox wrote its ~640 KB template to the node. */
const WRITTEN_BOUND_BYTES = 160 * 1024

/**
 * A node disk of its own in a t.testdir() (a loop-mounted ext4 with a journal, as a node's would be), so its
 * sector count is ours alone. Teardowns run first-in first-out: the unmount is registered before the testdir.
 */
async function nodeDisk (t: Test): Promise<{ mountpoint: string, sectorsWritten: () => Promise<number> }> {
  let mountpoint = ''
  t.teardown(async () => { if (mountpoint !== '') await unmountAllUnder(mountpoint) }) // the sandboxes' mounts too, if a step failed
  const dir = t.testdir({})
  const image = join(dir, 'node.img')
  mountpoint = join(dir, 'node')
  await mkdir(mountpoint)
  await run('truncate', ['-s', String(4 * GIB), image])
  await run('mkfs.ext4', ['-q', '-F', '-E', 'lazy_itable_init=0,lazy_journal_init=0,nodiscard', image])
  nativeMounts().mountLoop(image, mountpoint, 'ext4', MS_NOATIME, '')
  const device = (await run('findmnt', ['-n', '-o', 'SOURCE', '--mountpoint', mountpoint])).stdout.trim().replace('/dev/', '')
  return {
    mountpoint,
    sectorsWritten: async () => {
      await run('sync', ['-f', mountpoint])
      return Number((await readFile(`/sys/block/${device}/stat`, 'utf8')).trim().split(/\s+/)[6])
    }
  }
}

t.test('mountSandboxOverlay gives a loop-ext4 disk of the quota, and a short-lived sandbox writes next to nothing to the node\'s disk', async t => {
  const node = await nodeDisk(t)
  const lower = join(node.mountpoint, 'lower')
  await mkdir(lower)
  await writeFile(join(lower, 'from-image'), 'image')
  const sandboxes = join(node.mountpoint, 'sandboxes')

  // The first sandbox of a shape makes the template (mkfs); its disk must be as good as the later ones.
  const first = join(sandboxes, 'first')
  const o = await mountSandboxOverlay({ lower, stateDir: first, diskBytes: GIB })
  t.equal(await readFile(join(o.merged, 'from-image'), 'utf8'), 'image', 'the merged root shows the image')
  await writeFile(join(o.merged, 'new'), 'sandbox')
  t.equal(await readFile(join(o.upperDir, 'new'), 'utf8'), 'sandbox', 'a write lands in the upper')
  const fs = await statfs(overlayPaths(first).diskDir)
  t.ok(Math.abs(fs.blocks * fs.bsize - GIB) < GIB / 20, `the upper's filesystem has the quota's size (${fs.blocks * fs.bsize} bytes)`)
  await unmountSandboxOverlay(first)
  const fsck = await run('e2fsck', ['-f', '-n', overlayPaths(first).diskImage]).then(() => 'clean', (err: Error) => err.message)
  t.equal(fsck, 'clean', 'the disk file holds a clean ext4 after use (the template reached it through the device)')
  await removeSandboxOverlay(first)

  const before = await node.sectorsWritten()
  for (let i = 0; i < SANDBOXES; i++) {
    const stateDir = join(sandboxes, `s${i}`)
    const s = await mountSandboxOverlay({ lower, stateDir, diskBytes: GIB })
    await writeFile(join(s.merged, 'scratch'), Buffer.alloc(256 * 1024, i))
    await removeSandboxOverlay(stateDir)
  }
  const perSandbox = (await node.sectorsWritten() - before) * 512 / SANDBOXES
  t.ok(perSandbox < WRITTEN_BOUND_BYTES, `${SANDBOXES} sandboxes of 1 GiB, each writing 256 KiB and removed: ${(perSandbox / 1024).toFixed(1)} KiB each reached the node's disk (bound ${WRITTEN_BOUND_BYTES / 1024} KiB; the template alone is ~640)`)
})
