import t from 'tap'
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildLayerTar, dir, file, opaque, symlink, whiteout, writeLayerTar, type TarEntrySpec } from '../../../fixtures/layer-dsl.js'
import { NotFoundError, UnsupportedError } from '../../errors.js'
import type { ImageSource, OpenImageSourceOptions } from './image-source.js'
import { DEFAULT_PATH_ENV } from './rootfs-tar-source.js'
import { openImageSource } from './open-image-source.js'

interface ReadImage { diffIds: string[], layers: Array<Array<{ path: string, type: string, content?: string }>> }

async function readImage (src: ImageSource): Promise<ReadImage> {
  const out: ReadImage = { diffIds: [], layers: [] }
  for (const layer of src.layers) {
    const entries = []
    for await (const { header, body } of layer.entries()) {
      const chunks: Buffer[] = []
      if (body !== undefined) for await (const c of body) chunks.push(Buffer.from(c))
      entries.push({ path: header.path, type: header.type, ...(body !== undefined ? { content: Buffer.concat(chunks).toString() } : {}) })
    }
    out.layers.push(entries)
    out.diffIds.push(layer.diffId())
  }
  await src.close()
  return out
}

const UPPER_LAYER: TarEntrySpec[] = [dir('etc'), whiteout('etc/motd'), dir('var'), opaque('var'), file('var/new', 'new\n')]

/** A real OCI layout made by umoci (base layer from a directory, upper layer from a DSL tar), plus skopeo copies. */
async function buildImages (root: string): Promise<{ layout: string, ociArchive: string, dockerArchive: string, upperDiffId: string }> {
  const rootfs = join(root, 'rootfs')
  mkdirSync(join(rootfs, 'etc'), { recursive: true })
  writeFileSync(join(rootfs, 'etc', 'motd'), 'hello\n')
  writeFileSync(join(rootfs, 'etc', 'hostname'), 'box\n')
  const layout = join(root, 'oci')
  execFileSync('umoci', ['init', '--layout', layout])
  execFileSync('umoci', ['new', '--image', `${layout}:base`])
  execFileSync('umoci', ['insert', '--image', `${layout}:base`, rootfs, '/'])
  const upper = await writeLayerTar(join(root, 'upper.tar'), UPPER_LAYER)
  execFileSync('umoci', ['raw', 'add-layer', '--image', `${layout}:base`, upper.path, '--tag', 'v1'])
  const ociArchive = join(root, 'oci-archive.tar')
  const dockerArchive = join(root, 'docker-archive.tar')
  execFileSync('skopeo', ['copy', '-q', `oci:${layout}:v1`, `oci-archive:${ociArchive}:v1`])
  execFileSync('skopeo', ['copy', '-q', `oci:${layout}:v1`, `docker-archive:${dockerArchive}:test/img:v1`])
  return { layout, ociArchive, dockerArchive, upperDiffId: upper.diffId }
}

t.test('openImageSource() detects and reads an OCI layout, an OCI archive and a docker-archive made by umoci and skopeo', async t => {
  const root = t.testdir({})
  const imgs = await buildImages(root)
  const expected = [
    [{ path: '', type: 'dir' }, { path: 'etc', type: 'dir' }, { path: 'etc/hostname', type: 'file', content: 'box\n' }, { path: 'etc/motd', type: 'file', content: 'hello\n' }],
    [{ path: 'etc', type: 'dir' }, { path: 'etc/motd', type: 'whiteout' }, { path: 'var', type: 'dir' }, { path: 'var', type: 'opaque' }, { path: 'var/new', type: 'file', content: 'new\n' }]
  ]
  for (const [kind, path] of [['oci-layout', imgs.layout], ['oci-archive', imgs.ociArchive], ['docker-archive', imgs.dockerArchive]] as const) {
    const src = await openImageSource(path, { tag: 'v1' })
    t.equal(src.kind, kind)
    t.equal(src.name, path)
    t.equal(src.layers.length, 2)
    const diffIds = src.config.rootfs?.diff_ids
    const got = await readImage(src)
    t.match(got.layers, expected, `${kind}: entries, whiteout and opaque translated`)
    t.same(got.diffIds, diffIds, `${kind}: diff_ids verified against the config`)
    t.equal(got.diffIds[1], imgs.upperDiffId)
    t.match(src.layers[1]!.name, kind === 'docker-archive' ? /^docker-archive .*, layer 2 of 2 \(.*\.tar\)$/ : /layer 2 of 2 \(sha256:[0-9a-f]{12}\)$/)
  }
})

t.test('openImageSource() picks an image from a layout holding several, or says why it cannot', async t => {
  const root = t.testdir({})
  const { layout } = await buildImages(root)
  await t.rejects(openImageSource(layout), { name: 'BadInputError', message: /OCI layout .*: index\.json holds 2 images \(base, v1\); choose one by its ref name \(tag\)/ })
  await t.rejects(openImageSource(layout, { tag: 'v9' }), { name: 'BadInputError', message: /no image named "v9" in index\.json \(it has: base, v1\)/ })
  t.equal((await openImageSource(layout, { tag: 'base' })).layers.length, 1)
})

t.test('openImageSource() checks every blob of an OCI layout before reading any', async t => {
  const root = t.testdir({})
  const { layout } = await buildImages(root)
  const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8'))
  const manifestDigest = index.manifests.find((m: any) => m.annotations['org.opencontainers.image.ref.name'] === 'v1').digest as string
  const manifest = JSON.parse(readFileSync(join(layout, 'blobs/sha256', manifestDigest.slice(7)), 'utf8'))
  const layer = manifest.layers[1].digest as string
  const blob = join(layout, 'blobs/sha256', layer.slice(7))
  const bytes = readFileSync(blob)

  // A layer with a flipped byte: caught while streaming, naming the blob.
  const flipped = Buffer.from(bytes)
  flipped[flipped.length - 10] ^= 0xff
  writeFileSync(blob, flipped)
  const src = await openImageSource(layout, { tag: 'v1' })
  await t.rejects(readImage(src), { name: 'BadInputError', message: new RegExp(`layer 2 of 2 \\(sha256:[0-9a-f]{12}\\): (blob content has digest sha256:[0-9a-f]{64}, not ${layer}|gzip data is corrupt|unexpected end)`) })

  rmSync(blob)
  await t.rejects(openImageSource(layout, { tag: 'v1' }), {
    name: 'BadInputError',
    message: `OCI layout ${layout}: manifest ${manifestDigest} names layer ${layer} which is not in blobs/`
  })
  writeFileSync(blob, bytes.subarray(1))
  await t.rejects(openImageSource(layout, { tag: 'v1' }), { name: 'BadInputError', message: /names layer sha256:[0-9a-f]{64} with size \d+, but the blob is \d+ bytes/ })
})

t.test('openImageSource() refuses OCI descriptors that are not sha256 digests (no path tricks)', async t => {
  const root = t.testdir({ layout: { 'oci-layout': '{"imageLayoutVersion":"1.0.0"}' } })
  const layout = join(root, 'layout')
  writeFileSync(join(layout, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: 'sha256:../../../etc/passwd', size: 10 }] }))
  await t.rejects(openImageSource(layout), { name: 'BadInputError', message: /index\.json entry 1 has digest "sha256:\.\.\/\.\.\/\.\.\/etc\/passwd"; layerd reads sha256 digests only/ })
  writeFileSync(join(layout, 'index.json'), '{"manifests": [')
  await t.rejects(openImageSource(layout), { name: 'BadInputError', message: /index\.json is not valid JSON/ })
})

/** A docker-archive built by hand: legacy `<id>/layer.tar` symlinks to `<hex>.tar` members, one or more images. */
async function dockerArchive (root: string, images: Array<{ tags: string[], missingLayer?: boolean }>): Promise<string> {
  const layerTar = buildLayerTar([dir('bin'), file('bin/sh', 'sh'), symlink('bin/bash', 'sh')])
  const diffId = `sha256:${createHash('sha256').update(layerTar).digest('hex')}`
  const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config: { Cmd: ['/bin/sh'] }, rootfs: { type: 'layers', diff_ids: [diffId] } }))
  const configName = `${createHash('sha256').update(config).digest('hex')}.json`
  const layerId = 'a'.repeat(64)
  const manifest = images.map(img => ({ Config: configName, RepoTags: img.tags, Layers: [img.missingLayer === true ? `${'b'.repeat(64)}/layer.tar` : `${layerId}/layer.tar`] }))
  const path = join(root, `docker-${images.length}-${images.some(i => i.missingLayer === true)}.tar`)
  writeFileSync(path, buildLayerTar([
    file(`${diffId.slice(7)}.tar`, layerTar),
    dir(layerId),
    symlink(`${layerId}/layer.tar`, `../${diffId.slice(7)}.tar`),
    file(configName, config),
    file('manifest.json', JSON.stringify(manifest)),
    file('repositories', '{}')
  ]))
  return path
}

t.test('openImageSource() reads docker-archives: legacy symlinked layers, tag selection, missing layers', async t => {
  const root = t.testdir({})
  const one = await openImageSource(await dockerArchive(root, [{ tags: ['app:1'] }]))
  t.equal(one.kind, 'docker-archive')
  t.same(one.config.config?.Cmd, ['/bin/sh'])
  t.match((await readImage(one)).layers[0], [{ path: 'bin' }, { path: 'bin/sh', content: 'sh' }, { path: 'bin/bash', type: 'symlink' }])

  const two = await dockerArchive(root, [{ tags: ['app:1'] }, { tags: ['app:2', 'app:latest'] }, { tags: ['other:2'] }])
  await t.rejects(openImageSource(two), { name: 'BadInputError', message: /holds 3 images \(app:1, app:2\|app:latest, other:2\); choose one by tag/ })
  t.equal((await openImageSource(two, { tag: 'app:2' })).kind, 'docker-archive')
  t.equal((await openImageSource(two, { tag: '1' })).kind, 'docker-archive', 'a bare tag that matches one image')
  await t.rejects(openImageSource(two, { tag: '2' }), /several images match tag "2"/)
  await t.rejects(openImageSource(two, { tag: 'nope' }), /no image tagged "nope" \(it has: app:1, app:2, app:latest, other:2\)/)

  const missing = await dockerArchive(root, [{ tags: ['app:1'], missingLayer: true }])
  await t.rejects(openImageSource(missing), { name: 'BadInputError', message: `docker-archive ${missing}: manifest.json names layer "${'b'.repeat(64)}/layer.tar" which is not in the archive` })
})

t.test('openImageSource() reads plain, gzip and zstd rootfs tars, detected by content not name', async t => {
  const root = t.testdir({})
  const specs = [dir('./'), dir('./etc'), file('./etc/os-release', 'ID=test\n'), file('./manifest.json', '{"not": "an archive"}')]
  for (const compression of ['none', 'gzip', 'zstd'] as const) {
    const written = await writeLayerTar(join(root, `rootfs-${compression}.bin`), specs, compression)
    const src = await openImageSource(written.path)
    t.equal(src.kind, 'rootfs-tar', compression)
    t.same(src.config, { architecture: 'amd64', os: 'linux', config: { Env: [DEFAULT_PATH_ENV] }, rootfs: { type: 'layers', diff_ids: [] } })
    const got = await readImage(src)
    t.same(got.layers[0]!.map(e => e.path), ['', 'etc', 'etc/os-release', 'manifest.json'])
    t.same(got.diffIds, [written.diffId])
    t.same(src.config.rootfs?.diff_ids, [written.diffId], 'the config learns the diff_id once the layer is read')
  }
})

t.test('openImageSource() reads a directory as one layer', async t => {
  const root = t.testdir({ tree: { etc: { hostname: 'box\n' }, 'oci-layout-not': 'x' } })
  const src = await openImageSource(join(root, 'tree'))
  t.equal(src.kind, 'directory')
  t.same((await readImage(src)).layers[0]!.map(e => e.path), ['', 'etc', 'etc/hostname', 'oci-layout-not'])
})

t.test('openImageSource() refuses unknown, missing and unsupported inputs with one clear line', async t => {
  const root = t.testdir({ 'notes.txt': 'just text\n', empty: '', 'random.bin': Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 251)) })
  for (const name of ['notes.txt', 'empty', 'random.bin']) {
    const path = join(root, name)
    await t.rejects(openImageSource(path), { name: 'BadInputError', message: `cannot push ${path}: not an OCI layout, OCI archive, docker-archive, tar (plain/gzip/zstd) or directory` }, name)
  }
  await t.rejects(openImageSource(join(root, 'nope')), NotFoundError)
  // The xz magic is all detection looks at.
  writeFileSync(join(root, 'notes.txt.xz'), Buffer.concat([Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), Buffer.alloc(600, 1)]))
  await t.rejects(openImageSource(join(root, 'notes.txt.xz')), UnsupportedError)
  await t.rejects(openImageSource(join(root, 'notes.txt.xz')), /is xz-compressed/)
  t.ok(readdirSync(root).length > 0)
})

t.test('openImageSource() turns warnings into errors in strict mode', async t => {
  const root = t.testdir({})
  const path = join(root, 'abs.tar')
  writeFileSync(path, buildLayerTar([file('/etc/motd', 'hi')]))
  const warnings: string[] = []
  const opts: OpenImageSourceOptions = { warn: m => warnings.push(m) }
  await readImage(await openImageSource(path, opts))
  t.match(warnings, [/tar .*abs\.tar, layer 1 of 1 \(abs\.tar\): entry "\/etc\/motd" at offset 0 has an absolute name/])
  await t.rejects(readImage(await openImageSource(path, { strict: true })), { name: 'BadInputError', message: /absolute name.*refused in strict mode/ })
})

t.test('openImageSource() follows a nested image index to the linux/amd64 manifest', async t => {
  const root = t.testdir({})
  const { layout } = await buildImages(root)
  const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8'))
  const byRef = (ref: string): any => index.manifests.find((m: any) => m.annotations['org.opencontainers.image.ref.name'] === ref)
  const nested = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests: [
      { ...byRef('base'), annotations: undefined, platform: { os: 'linux', architecture: 'arm64' } },
      { ...byRef('v1'), annotations: undefined, platform: { os: 'linux', architecture: 'amd64' } }
    ]
  }))
  const digest = createHash('sha256').update(nested).digest('hex')
  writeFileSync(join(layout, 'blobs/sha256', digest), nested)
  writeFileSync(join(layout, 'index.json'), JSON.stringify({
    schemaVersion: 2,
    manifests: [{ mediaType: 'application/vnd.oci.image.index.v1+json', digest: `sha256:${digest}`, size: nested.length, annotations: { 'org.opencontainers.image.ref.name': 'multi' } }]
  }))
  const src = await openImageSource(layout)
  t.equal(src.layers.length, 2, 'the amd64 image (two layers), not the arm64 one')
  t.equal(src.config.architecture, 'amd64')
  writeFileSync(join(layout, 'blobs/sha256', digest), Buffer.concat([nested, Buffer.from(' ')]))
  await t.rejects(openImageSource(layout), { name: 'BadInputError', message: /with size \d+, but the blob is \d+ bytes/ })
})
