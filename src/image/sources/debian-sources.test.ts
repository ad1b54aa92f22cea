import t from 'tap'
import { createHash } from 'node:crypto'
import { CAP_NET_RAW_XATTR_B64 } from '../../../fixtures/debian-image-build.js'
import { ensureDebianImages } from '../../../fixtures/debian-images.js'
import type { EntryHeader, ImageSource, ImageSourceKind } from './image-source.js'
import { openImageSource } from './open-image-source.js'

// Real Debian images (debootstrap minbase + python3, via umoci and skopeo), built once and cached.
const imgs = await ensureDebianImages()

interface Read { entries: Map<string, EntryHeader & { sha256?: string }>, diffIds: string[], count: number }

async function readSource (src: ImageSource): Promise<Read> {
  const entries = new Map<string, EntryHeader & { sha256?: string }>()
  let count = 0
  for (const layer of src.layers) {
    for await (const { header, body } of layer.entries()) {
      count++
      if (body === undefined) { entries.set(`${header.type === 'whiteout' || header.type === 'opaque' ? header.type : ''}:${header.path}`, header); continue }
      const h = createHash('sha256')
      for await (const chunk of body) h.update(chunk)
      entries.set(`:${header.path}`, { ...header, sha256: h.digest('hex') })
    }
  }
  return { entries, diffIds: src.layers.map(l => l.diffId()), count }
}

t.test('openImageSource() reads the real Debian images in every format, strictly, with the diff_ids they record', async t => {
  const cases: Array<[ImageSourceKind, string, typeof imgs.images.base]> = [
    ['oci-layout', imgs.images.base.ociLayout, imgs.images.base],
    ['oci-archive', imgs.pythonV1OciArchive, imgs.images['python-v1']],
    ['oci-layout', imgs.images['python-v2'].ociLayout, imgs.images['python-v2']],
    ['docker-archive', imgs.images['python-v2'].dockerArchive, imgs.images['python-v2']]
  ]
  for (const [kind, path, record] of cases) {
    const warnings: string[] = []
    const src = await openImageSource(path, { strict: true, warn: m => warnings.push(m) })
    t.equal(src.kind, kind, path)
    t.same(src.config.rootfs?.diff_ids, record.layers.map(l => l.diffId), `${kind} ${record.name}: config`)
    const read = await readSource(src)
    t.same(read.diffIds, record.layers.map(l => l.diffId), `${kind} ${record.name}: diff_ids computed while reading`)
    t.ok(read.count >= record.entries - 1, `${kind} ${record.name}: ${read.count} entries`)
    t.same(warnings, [])
    if (record.name === 'python-v2') {
      // umoci repack of python-v2 added a file capability (binary xattr), a hardlink and whiteouts.
      t.equal(read.entries.get(':usr/local/bin/fixture-hello')?.xattrs?.['security.capability'], CAP_NET_RAW_XATTR_B64, `${kind}: binary xattr`)
      t.match(read.entries.get(':usr/local/bin/fixture-hello-again'), { type: 'hardlink', target: 'usr/local/bin/fixture-hello' }, `${kind}: hardlink`)
      t.ok(read.entries.has('whiteout:etc/issue.net'), `${kind}: whiteout`)
    }
    await src.close()
  }
})

t.test('a Debian rootfs tar reads back exactly as the directory tree it was made from', async t => {
  const fromTar = await readSource(await openImageSource(imgs.baseRootfsTar.zstd, { strict: true }))
  const fromDir = await readSource(await openImageSource(imgs.images.base.rootfs, { strict: true }))
  t.equal(fromTar.count, imgs.images.base.entries)
  t.equal(fromDir.count, fromTar.count)
  t.equal(fromTar.diffIds[0], imgs.images.base.layers[0]!.diffId, 'the rootfs tar is the base layer')
  let differences = 0
  for (const [key, tarEntry] of fromTar.entries) {
    const dirEntry = fromDir.entries.get(key)
    if (JSON.stringify(dirEntry) !== JSON.stringify(tarEntry)) {
      if (differences++ < 5) t.same(dirEntry, tarEntry, `${key} differs`)
    }
  }
  t.equal(differences, 0, 'every path has the same type, mode, ids, mtime, size, content, link target, devices and xattrs')
  t.ok([...fromTar.entries.values()].some(e => e.type === 'char'), 'device nodes included')
})
