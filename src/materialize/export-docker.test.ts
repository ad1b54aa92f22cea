/**
 * Issue 12: `docker load` accepts the Debian python image exported in each
 * format (a private dockerd with its own containerd, data root and socket,
 * started and stopped here), and `docker run` of each prints python's 2+2.
 * (export-layout.test.ts checks the formats with skopeo and the round trip;
 * the two are apart to keep each file well inside the suite's timeout.)
 */
import t from 'tap'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DockerNode } from '../../bench/deploy/docker-node.js'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { runCommand } from '../../fixtures/run-command.js'

const work = t.testdir()
const node = layerdNode(join(work, 'home'))

t.test('docker load and docker run accept the python image in each export format', async t => {
  const images = await ensureDebianImages()
  const python = images.images['python-v1']
  t.equal((await node.layerctl('push', `oci:${python.ociLayout}:${python.ociTag}`, 'deb/python:v1')).code, 0)
  // Sockets live in the run dir: a short path (unix socket paths are limited to 107 bytes).
  const runDir = await mkdtemp(join(tmpdir(), 'layerd-export-docker-'))
  const docker = await DockerNode.start({ dataDir: join(work, 'docker-data'), runDir })
  t.teardown(async () => {
    await docker.stop()
    // dockerd bind-mounts its data root onto itself and leaves it on a fast exit: unmount before the testdir goes.
    await runCommand('umount', [join(work, 'docker-data', 'docker')]).catch(() => {})
    await rm(runDir, { recursive: true, force: true })
  })
  for (const format of ['oci', 'oci-archive', 'docker-archive'] as const) {
    const out = join(work, `python.${format}`)
    const r = await node.layerctl('export', 'deb/python:v1', '--format', format, '-o', out)
    t.equal(r.code, 0, r.stderr)
    const rm = await docker.docker('rmi', '-f', 'deb/python:v1')
    t.ok(rm.code === 0 || /No such image/.test(rm.stderr), rm.stderr)
    let archive = out
    if (format === 'oci') {
      // `tar -C DIR -c . | docker load`: docker 20.10 reads the layout's manifest.json.
      archive = join(work, 'layout-for-docker.tar')
      await runCommand('tar', ['-C', out, '-cf', archive, '.'])
    }
    const load = await docker.docker('load', '-i', archive)
    t.equal(load.code, 0, `docker load of ${format}: ${load.stderr}`)
    t.match(load.stdout, /Loaded image: deb\/python:v1/)
    const run = await docker.docker('run', '--rm', '--network', 'none', 'deb/python:v1', 'python3', '-c', 'print(2+2)')
    t.equal(run.stdout.trim(), '4', `docker run of the ${format} export prints 4 (${run.stderr.trim()})`)
    await rm_(archive === out ? out : archive)
    if (archive !== out) await rm_(out)
  }
})

async function rm_ (path: string): Promise<void> { await rm(path, { recursive: true, force: true }) }
