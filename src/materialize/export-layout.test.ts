/**
 * Issue 12's image export (`layerctl export NAME:TAG --format …`):
 *
 * - a layer's whiteouts, opaque directories and hardlinks come out as real
 *   OCI markers and tar hardlinks, one exported layer per stored layer;
 * - the Debian python image exported in each format is accepted by
 *   `skopeo inspect` (docker load and run: export-docker.test.ts);
 * - each export's layers are the source's tars byte for byte (tar splits),
 *   so export → push gives the original manifest digest from all three
 *   formats, and exporting that image again writes the same image.
 */
import t from 'tap'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { layerdNode } from '../../fixtures/layerd-harness.js'
import { buildLayerTar, dir, file, hardlink, opaque, symlink, whiteout } from '../../fixtures/layer-dsl.js'
import { writeOciLayout } from '../../fixtures/oci-layout.js'
import { runCommand } from '../../fixtures/run-command.js'
import { openTarFile, readTarRecords } from '../../fixtures/tar-reader.js'

const work = t.testdir()
const node = layerdNode(join(work, 'home'))

async function layerNames (layoutDir: string): Promise<string[][]> {
  const index = JSON.parse(await readFile(join(layoutDir, 'index.json'), 'utf8'))
  const blob = (d: string): string => join(layoutDir, 'blobs', 'sha256', d.slice('sha256:'.length))
  const manifest = JSON.parse(await readFile(blob(index.manifests[0].digest), 'utf8'))
  const out: string[][] = []
  for (const l of manifest.layers) {
    const names: string[] = []
    for await (const r of readTarRecords(await openTarFile(blob(l.digest)))) names.push(`${r.header.typeflag} ${r.header.name}${r.header.linkname === '' ? '' : ` -> ${r.header.linkname}`}`)
    out.push(names)
  }
  return out
}

t.test('export --format oci writes one layer per stored layer, with real whiteouts, opaque markers and hardlinks', async t => {
  const layout = await writeOciLayout(join(work, 'small'), {
    layers: [
      { tar: buildLayerTar([dir('etc'), file('etc/a.conf', 'a'), file('etc/b.conf', 'b'), dir('var'), dir('var/cache'), file('var/cache/x', 'x')]) },
      { tar: buildLayerTar([dir('etc'), whiteout('etc/a.conf'), opaque('var/cache'), file('var/cache/y', 'y'), hardlink('etc/b.link', 'etc/b.conf'), symlink('etc/c', 'b.conf')]) }
    ]
  })
  t.equal((await node.layerctl('push', `oci:${layout.dir}`, 'small:v1')).code, 0)
  const r = await node.layerctl('export', 'small:v1', '--format', 'oci', '-o', join(work, 'small-export'))
  t.equal(r.code, 0, r.stderr)
  const [lower, upper] = await layerNames(join(work, 'small-export'))
  t.same(lower, ['5 etc/', '0 etc/a.conf', '0 etc/b.conf', '5 var/', '5 var/cache/', '0 var/cache/x'], 'the lower layer as pushed')
  t.same(upper, ['5 etc/', '0 etc/.wh.a.conf', '0 var/cache/.wh..wh..opq', '0 var/cache/y', '1 etc/b.link -> etc/b.conf', '2 etc/c -> b.conf'],
    'the upper layer keeps its whiteout, opaque marker, hardlink and symlink')
  const again = await node.layerctl('push', `oci:${join(work, 'small-export')}:v1`, 'small:round', '--json')
  t.equal(again.code, 0, again.stderr)
  const r2 = await node.layerctl('export', 'small:round', '--format', 'oci', '-o', join(work, 'small-export-2'))
  t.same(await layerNames(join(work, 'small-export-2')), [lower, upper], 'the round trip keeps every layer')
  t.equal(/manifest (sha256:\S+)/.exec(r2.stdout)?.[1], /manifest (sha256:\S+)/.exec(r.stdout)?.[1], 'and writes the same image again')
})

t.test('the python image in each export format: skopeo inspect accepts it; export → push is one manifest, a fixed point', async t => {
  const images = await ensureDebianImages()
  const python = images.images['python-v1']
  const pushed = await node.layerctl('push', `oci:${python.ociLayout}:${python.ociTag}`, 'deb/python:v1', '--json')
  t.equal(pushed.code, 0, pushed.stderr)
  const out = (f: string): string => join(work, `python.${f}`)
  const exported: string[] = []
  const pushedBack: string[] = []
  for (const format of ['oci', 'oci-archive', 'docker-archive'] as const) {
    const r = await node.layerctl('export', 'deb/python:v1', '--format', format, '-o', out(format), '--json')
    t.equal(r.code, 0, r.stderr)
    const result = JSON.parse(r.stdout)
    exported.push(result.manifest)
    t.same(result.layers.map((l: { digest: string, exact: boolean }) => [l.digest, l.exact]), python.layers.map(l => [l.diffId, true]),
      `${format}: every layer is the source's tar, byte for byte (its digest is the source diff_id)`)
    const skopeoRef = format === 'docker-archive' ? `docker-archive:${out(format)}` : `${format}:${out(format)}:v1`
    const inspect = JSON.parse(await runCommand('skopeo', ['inspect', skopeoRef]))
    t.equal(inspect.Layers.length, 2, `skopeo inspect ${format}: 2 layers`)
    t.equal(inspect.Labels['org.layerd.fixture'], 'python-v1', `skopeo inspect ${format}: the original config`)
    const back = await node.layerctl('push', format === 'docker-archive' ? `docker-archive:${out(format)}` : `${format}:${out(format)}:v1`, `back:${format}`, '--json')
    t.equal(back.code, 0, back.stderr)
    pushedBack.push(JSON.parse(back.stdout).manifest)
  }
  t.equal(new Set(exported).size, 1, 'the three formats hold the same image manifest')
  t.same(pushedBack, pushedBack.map(() => JSON.parse(pushed.stdout).manifest), 'export → push gives the original manifest digest from every format (round trip)')
  const second = await node.layerctl('export', 'back:oci', '--format', 'oci', '-o', join(work, 'python.oci-2'))
  t.match(second.stdout, 'every layer its original tar, byte for byte')
  t.equal(/manifest (sha256:\S+)/.exec(second.stdout)?.[1], exported[0], 'exporting the pushed-back image writes the same image (fixed point)')
})
