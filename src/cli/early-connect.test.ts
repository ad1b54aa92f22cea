/**
 * connectEarly through the real CLI: `layerctl mount` on a cold node starts
 * layerd before the command runs, and its connection never keeps the
 * process alive (a usage error still exits 2 at once); other commands do not
 * start a daemon they do not need.
 */
import t from 'tap'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { socketPath } from '../daemon/client/control-protocol.js'

// A short directory: the daemon's socket path must fit in sun_path (108 bytes).
const work = await import('node:fs/promises').then(fs => fs.mkdtemp('/tmp/layerd-early-'))
t.teardown(async () => await import('node:fs/promises').then(fs => fs.rm(work, { recursive: true, force: true })))

t.test('layerctl images on a cold node starts no daemon', async t => {
  const node = layerdNode(join(work, 'images'))
  t.teardown(() => node.stopDaemon())
  const r = await node.layerctl('images')
  t.equal(r.code, 0, r.stderr)
  t.notOk(existsSync(socketPath(node.home)), 'no control socket')
  t.equal(await node.holderPid(), undefined, 'no holder')
})

t.test('connectEarly: layerctl mount with a usage error on a cold node exits 2, and the daemon it started serves', async t => {
  const node = layerdNode(join(work, 'mount'))
  t.teardown(() => node.stopDaemon())
  const r = await node.layerctl('mount', 'only-one-argument')
  t.equal(r.code, 2, 'the usage error is the exit code')
  t.match(r.stderr, /mount takes NAME:TAG and DIR/)
  t.ok(existsSync(socketPath(node.home)), 'layerd was started early and serves')
  const mounts = await node.layerctl('mounts', '--json')
  t.equal(mounts.code, 0, mounts.stderr)
  t.same(JSON.parse(mounts.stdout), [], 'the early-started daemon answers, with nothing mounted')
})
