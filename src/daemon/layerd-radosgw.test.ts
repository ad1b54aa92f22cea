/**
 * A layerd node on a real S3 engine that checks signatures: the Debian python
 * image pushed to radosgw (fixtures/radosgw.ts; writes through the SDK), then
 * a cold node mounts it and reads it through S3HttpReader, our own SigV4
 * signer. The same walk against s3rver is in layerd.test.ts.
 */
import t from 'tap'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode, run } from '../../fixtures/layerd-harness.js'
import { startRadosgw } from '../../fixtures/radosgw.js'
import { compareTrees, snapshotTree } from '../../fixtures/tree-compare.js'

const images = await ensureDebianImages()
const python = images.images['python-v1']
const work = t.testdir()
const rgw = await startRadosgw(join(work, 'rgw'))
t.teardown(() => rgw.stop())
const env = { AWS_ACCESS_KEY_ID: rgw.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: rgw.credentials.secretAccessKey, LAYERD_S3_ENDPOINT: rgw.endpoint }
const url = `s3://${rgw.bucket}/layerd`

t.test('an image pushed to radosgw mounts cold on another node: python runs and every file and attribute is served', async t => {
  const pusher = layerdNode(join(work, 'pusher'), { store: url, env })
  t.teardown(() => pusher.stopDaemon())
  const pushed = await pusher.layerctl('push', python.dockerArchive, 'deb/python:v1')
  t.equal(pushed.code, 0, pushed.stderr)

  const node = layerdNode(join(work, 'node'), { store: url, env })
  t.teardown(() => node.stopDaemon())
  await node.startDaemon()
  const mnt = join(node.home, 'mnt')
  const mounted = await node.layerctl('mount', 'deb/python:v1', mnt)
  t.equal(mounted.code, 0, mounted.stderr)
  const py = await run('chroot', [mnt, '/usr/bin/python3', '-c', 'import json, sqlite3, ssl; print("imported")'], process.env)
  t.equal(py.code, 0, py.stderr)
  t.equal(py.stdout.trim(), 'imported')
  const got = await snapshotTree(mnt)
  t.same(compareTrees(await snapshotTree(python.rootfs), got, { skip: p => p === '', labels: ['source', 'mount'] }), [], `${got.size} paths equal`)
  const stats = JSON.parse((await node.layerctl('stats', mnt, '--json')).stdout) as Record<string, number>
  t.equal(stats.corruptChunks, 0)
  t.ok(stats.fetchedBytes >= stats.storedBytes * 0.9, `the walk fetched ${stats.fetchedBytes} of ${stats.storedBytes} stored bytes from radosgw`)
  t.equal((await node.layerctl('umount', mnt)).code, 0)
})

t.test('a node with the wrong secret cannot mount from radosgw, and says why', async t => {
  const node = layerdNode(join(work, 'forged'), { store: url, env: { ...env, AWS_SECRET_ACCESS_KEY: 'not-the-secret' } })
  t.teardown(() => node.stopDaemon())
  const r = await node.layerctl('mount', 'deb/python:v1', join(node.home, 'mnt'))
  t.equal(r.code, 2, 'a store that refuses access is a usage error (exit 2)')
  t.match(r.stderr, /SignatureDoesNotMatch/)
})
