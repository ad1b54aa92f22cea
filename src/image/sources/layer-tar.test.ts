import t from 'tap'
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createReadStream, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import {
  buildLayerTar, contentBytes, dir, file, hardlink, sampleLayerEntries, symlink, writeLayerTar, zstdBytes,
  type Compression, type TarEntrySpec
} from '../../../fixtures/layer-dsl.js'
import { encodeHeader, writeBase256, writeChecksum, FIELD, END_OF_ARCHIVE } from '../../../fixtures/tar-header.js'
import { BadInputError, LimitExceededError, UsageError } from '../../errors.js'
import type { Digest } from '../../format/digest.js'
import type { EntryHeader, OpenImageSourceOptions } from './image-source.js'
import { ingestContext } from './ingest-policy.js'
import { TarLayerSource, type TarLayerInput } from './layer-tar.js'

const MIB = 1024 * 1024

function layerOf (path: string, opts: OpenImageSourceOptions = {}, extra: Partial<TarLayerInput> = {}): TarLayerSource {
  return new TarLayerSource({ name: `tar ${path}, layer 1 of 1`, open: () => createReadStream(path), ...extra }, ingestContext(opts))
}

interface ReadEntry { header: EntryHeader, sha256?: string, bytes?: number }

async function readAll (layer: TarLayerSource): Promise<ReadEntry[]> {
  const out: ReadEntry[] = []
  for await (const { header, body } of layer.entries()) {
    if (body === undefined) { out.push({ header }); continue }
    const h = createHash('sha256')
    let bytes = 0
    for await (const chunk of body) { h.update(chunk); bytes += chunk.length }
    out.push({ header, sha256: h.digest('hex'), bytes })
  }
  return out
}

/** What the sample layer's specs should read back as. */
function expectedFrom (specs: TarEntrySpec[]): Array<Partial<EntryHeader> & { sha256?: string }> {
  return specs.map(s => {
    const path = s.path.replace(/\/+$/, '')
    const base = path.slice(path.lastIndexOf('/') + 1)
    const parent = path.slice(0, Math.max(0, path.lastIndexOf('/')))
    if (base === '.wh..wh..opq') return { path: parent, type: 'opaque' as const }
    if (base.startsWith('.wh.')) return { path: `${parent === '' ? '' : `${parent}/`}${base.slice(4)}`, type: 'whiteout' as const }
    const e: Partial<EntryHeader> & { sha256?: string } = { path, type: s.kind, mode: s.mode, uid: s.uid, gid: s.gid, mtime: s.mtime }
    if (s.kind === 'file') {
      e.size = s.content!.size
      e.sha256 = createHash('sha256').update(contentBytes(s.content!)).digest('hex')
    }
    if (s.target !== undefined) e.target = s.target
    if (s.kind === 'char' || s.kind === 'block') { e.devMajor = s.devMajor!; e.devMinor = s.devMinor! }
    if (Object.keys(s.xattrs).length > 0) e.xattrs = Object.fromEntries(Object.entries(s.xattrs).map(([k, v]) => [k, Buffer.from(v).toString('base64')]))
    return e
  })
}

t.test('TarLayerSource.entries() reads every entry kind, plain, gzip and zstd, with the right diffId', async t => {
  const dir = t.testdir({})
  const specs = sampleLayerEntries({ largeBytes: 3 * MIB + 5, sparseBytes: 4 * MIB })
  const expected = expectedFrom(specs)
  for (const compression of ['none', 'gzip', 'zstd'] as Compression[]) {
    const written = await writeLayerTar(join(dir, `layer.${compression}`), specs, compression)
    const layer = layerOf(written.path)
    t.throws(() => layer.diffId(), UsageError, 'diffId() waits for the end')
    const got = await readAll(layer)
    t.equal(got.length, expected.length, `${compression}: entry count`)
    for (const [i, e] of expected.entries()) {
      const { sha256, ...header } = e
      t.match(got[i]!.header, header, `${compression}: ${e.path}`)
      if (sha256 !== undefined) t.equal(got[i]!.sha256, sha256, `${compression}: content of ${e.path}`)
      if (got[i]!.header.xattrs !== undefined) t.same(got[i]!.header.xattrs, header.xattrs, 'exactly the xattrs written')
    }
    t.equal(layer.diffId(), written.diffId, `${compression}: diffId`)
    await t.rejects(async () => { for await (const _ of layer.entries()) break }, UsageError, 'one pass only')
  }
  // A second implementation of the diff_id: sha256sum of the uncompressed tar.
  const sum = execFileSync('sha256sum', [join(dir, 'layer.none')]).toString().split(' ')[0]
  t.equal((await writeLayerTar(join(dir, 'again'), specs)).diffId, `sha256:${sum}`)
})

t.test('TarLayerSource.entries() reads what GNU tar writes (gnu and pax formats, long and unicode names, xattrs, devices)', async t => {
  const dir = t.testdir({})
  const src = join(dir, 'src')
  const longDir = join(src, 'l'.repeat(200))
  execFileSync('mkdir', ['-p', longDir])
  writeFileSync(join(longDir, 'naïve-日本語.txt'), 'hi')
  writeFileSync(join(src, 'f'), 'data')
  execFileSync('ln', [join(src, 'f'), join(src, 'f2')])
  execFileSync('ln', ['-s', `../${'t'.repeat(150)}`, join(longDir, 'link')])
  execFileSync('setfattr', ['-n', 'user.bin', '-v', '0x00ff80', join(src, 'f')])
  execFileSync('mknod', [join(src, 'null'), 'c', '1', '3'])
  for (const format of ['gnu', 'pax']) {
    const tarFile = join(dir, `${format}.tar`)
    execFileSync('tar', [`--format=${format}`, '--xattrs', '--xattrs-include=*', '--sort=name', '-C', src, '-cf', tarFile, '.'])
    const got = await readAll(layerOf(tarFile))
    const byPath = new Map(got.map(e => [e.header.path, e.header]))
    t.match(byPath.get(`${'l'.repeat(200)}/naïve-日本語.txt`), { type: 'file', size: 2 }, `${format}: long unicode name`)
    t.match(byPath.get(`${'l'.repeat(200)}/link`), { type: 'symlink', target: `../${'t'.repeat(150)}` }, `${format}: long link target`)
    t.match(byPath.get('f2'), { type: 'hardlink', target: 'f' }, `${format}: hardlink`)
    t.match(byPath.get('null'), { type: 'char', devMajor: 1, devMinor: 3 }, `${format}: device`)
    if (format === 'pax') t.same(byPath.get('f')?.xattrs, { 'user.bin': Buffer.from([0, 0xff, 0x80]).toString('base64') }, 'binary xattr from SCHILY.xattr')
    t.equal(byPath.get('')?.type, 'dir')
  }
})

t.test('TarLayerSource.entries() drains unread content and releases the input when abandoned', async t => {
  const dir = t.testdir({})
  const specs = [dir_('a'), file('a/big', { size: 3 * MIB, seed: 1 }), file('a/small', 'x'), file('a/last', 'y')]
  const written = await writeLayerTar(join(dir, 'l.tar.gz'), specs, 'gzip')
  const layer = layerOf(written.path)
  const paths = []
  for await (const e of layer.entries()) paths.push(e.header.path)
  t.same(paths, ['a', 'a/big', 'a/small', 'a/last'], 'bodies left unread are skipped')
  t.equal(layer.diffId(), written.diffId)

  const fdsBefore = readdirSync('/proc/self/fd').length
  for (let i = 0; i < 5; i++) {
    for await (const e of layerOf(written.path).entries()) {
      if (e.body !== undefined) { for await (const _ of e.body) break }
      if (e.header.path === 'a/big') break
    }
  }
  await new Promise(resolve => setTimeout(resolve, 50))
  t.ok(readdirSync('/proc/self/fd').length <= fdsBefore, 'no file descriptor left open')
})

function dir_ (p: string): TarEntrySpec { return dir(p) }

t.test('TarLayerSource.entries() refuses truncated and corrupt tar, gzip and zstd, naming the layer', async t => {
  const d = t.testdir({})
  const specs = [dir('etc'), file('etc/a', { size: 300_000, seed: 2 }), file('etc/b', 'b')]
  const tar = buildLayerTar(specs)
  const cases: Array<[string, Buffer, RegExp]> = [
    ['tar cut inside an entry', tar.subarray(0, 100_000), /tar .*layer 1 of 1: unexpected end of data at offset 100000 inside entry "etc\/a" \(\d+ of its 300000 bytes missing; truncated\?\)/],
    ['tar cut inside a header', tar.subarray(0, 700), /unexpected end of data at offset 700 inside a tar header/],
    ['tar with a corrupt header', corruptAt(tar, 512 + 10), /bad header checksum at offset 512/],
    ['gzip cut short', gzipSync(tar).subarray(0, 2000), /unexpected end of gzip data/],
    ['gzip with flipped bytes', corruptAt(gzipSync(tar), 1000), /gzip data is corrupt/],
    ['zstd cut short', zstdBytes(tar).subarray(0, 2000), /unexpected end of zstd data/],
    ['zstd with flipped bytes', corruptAt(zstdBytes(tar), 3000), /zstd data is corrupt/],
    ['not a tar at all', Buffer.alloc(4096, 0x41), /bad header checksum at offset 0/]
  ]
  for (const [what, bytes, message] of cases) {
    const path = join(d, 'broken')
    writeFileSync(path, bytes)
    const started = Date.now()
    await t.rejects(readAll(layerOf(path)), { name: 'BadInputError', message }, what)
    t.ok(Date.now() - started < 5000, `${what}: fails fast`)
  }
})

function corruptAt (buf: Buffer, offset: number): Buffer {
  const copy = Buffer.from(buf)
  for (let i = offset; i < offset + 16; i++) copy[i] = copy[i]! ^ 0x5a
  return copy
}

t.test('TarLayerSource.entries() stops at the end-of-archive marker, like GNU tar and Go', async t => {
  const d = t.testdir({})
  const first = buildLayerTar([file('a', 'a')])
  const hidden = buildLayerTar([file('etc/cron.d/evil', 'x')])
  const path = join(d, 'cat.tar')
  writeFileSync(path, Buffer.concat([first, hidden]))
  const warnings: string[] = []
  const got = await readAll(layerOf(path, { warn: m => warnings.push(m) }))
  t.same(got.map(e => e.header.path), ['a'], 'entries behind the marker never reach the image')
  t.match(warnings, [/ignored \d+ non-zero bytes after the end-of-archive marker at offset 1024/])
  await t.rejects(readAll(layerOf(path, { strict: true })), { name: 'BadInputError', message: /refused in strict mode/ })

  const oneZero = join(d, 'one-zero.tar')
  writeFileSync(oneZero, Buffer.concat([first.subarray(0, 1024), Buffer.alloc(512), hidden]))
  await t.rejects(readAll(layerOf(oneZero)), { name: 'BadInputError', message: /a tar header follows a zero block at offset 1536/ })

  // umoci writes layers that stop right after the last file's data (no padding, no marker); Go reads them.
  const unpadded = join(d, 'unpadded.tar')
  const full = buildLayerTar([file('a', 'a'), file('b', 'hello')])
  writeFileSync(unpadded, full.subarray(0, 512 * 3 + 5))
  const short = await readAll(layerOf(unpadded))
  t.same(short.map(e => [e.header.path, e.bytes]), [['a', 1], ['b', 5]], 'missing padding after the last entry is accepted')
  writeFileSync(unpadded, full.subarray(0, 512 * 3 + 4))
  await t.rejects(readAll(layerOf(unpadded)), { name: 'BadInputError', message: /unexpected end of data at offset 1540 inside entry "b" \(1 of its 5 bytes missing/ }, 'but not missing data')

  const layer = layerOf(path)
  await readAll(layer)
  t.equal(layer.diffId(), `sha256:${createHash('sha256').update(Buffer.concat([first, hidden])).digest('hex')}`, 'the diff_id covers every byte')
})

t.test('TarLayerSource.entries() enforces header sizes and entry counts before reading data', async t => {
  const d = t.testdir({})
  const huge = encodeHeader({ name: 'huge', mode: 0o644, uid: 0, gid: 0, size: 40 * 1024 ** 3, mtime: 0, typeflag: '0' })
  writeFileSync(join(d, 'huge.tar'), Buffer.concat([huge, Buffer.alloc(4096)]))
  await t.rejects(readAll(layerOf(join(d, 'huge.tar'), { limits: { maxEntryBytes: 1024 ** 3 } })),
    { name: 'LimitExceededError', message: /layer 1 of 1: entry "huge" at offset 0 declares 42949672960 bytes, above the limit of 1073741824/ })

  const absurd = encodeHeader({ name: 'absurd', mode: 0o644, uid: 0, gid: 0, size: 1, mtime: 0, typeflag: '0' })
  writeBase256(absurd, FIELD.size[0], FIELD.size[1], 2n ** 70n)
  writeChecksum(absurd)
  writeFileSync(join(d, 'absurd.tar'), Buffer.concat([absurd, END_OF_ARCHIVE]))
  await t.rejects(readAll(layerOf(join(d, 'absurd.tar'))), { name: 'BadInputError', message: /absurd size \(beyond 2\^53\) in the header at offset 0/ })

  writeFileSync(join(d, 'many.tar'), buildLayerTar(Array.from({ length: 20 }, (_, i) => file(`f${i}`, ''))))
  await t.rejects(readAll(layerOf(join(d, 'many.tar'), { limits: { maxEntries: 10 } })), { name: 'LimitExceededError', message: /more than 10 entries/ })
})

t.test('TarLayerSource.entries() applies the ingest policy, naming layer and entry', async t => {
  const d = t.testdir({})
  const cases: Array<[string, TarEntrySpec[], RegExp]> = [
    ['traversal', [file('../../etc/cron.d/x', 'x')], /layer 1 of 1: entry "\.\.\/\.\.\/etc\/cron\.d\/x" at offset 0 is refused: the name contains a '\.\.' component/],
    ['symlink then a file inside it', [symlink('a', '/etc'), file('a/passwd', 'x')], /entry "a\/passwd" at offset 512 lies below "a", a symlink of this layer/],
    ['escaping symlink', [symlink('x/y', '../../../etc')], /symlink to "\.\.\/\.\.\/\.\.\/etc", which climbs above the image root/],
    ['escaping hardlink', [hardlink('h', '../etc/shadow')], /hardlink to "\.\.\/etc\/shadow", which is refused/],
    ['duplicate', [file('a', '1'), file('./a', '2')], /entry "\.\/a" at offset 1024 appears twice in the layer/]
  ]
  for (const [what, specs, message] of cases) {
    const path = join(d, 'p.tar')
    writeFileSync(path, buildLayerTar(specs))
    await t.rejects(readAll(layerOf(path)), { name: 'BadInputError', message }, what)
  }
  const abs = join(d, 'abs.tar')
  writeFileSync(abs, buildLayerTar([file('/etc/motd', 'hi')]))
  const warnings: string[] = []
  t.match((await readAll(layerOf(abs, { warn: m => warnings.push(m) })))[0]?.header, { path: 'etc/motd' })
  t.match(warnings, [/entry "\/etc\/motd" at offset 0 has an absolute name; stored as "etc\/motd"/])
})

t.test('TarLayerSource.entries() verifies the blob digest, size and diff_id it was given', async t => {
  const d = t.testdir({})
  const written = await writeLayerTar(join(d, 'l.tar.gz'), [file('a', 'a')], 'gzip')
  const other: Digest = `sha256:${'1'.repeat(64)}`
  await t.rejects(readAll(layerOf(written.path, {}, { blobDigest: other })), { name: 'BadInputError', message: new RegExp(`blob content has digest ${written.digest}, not ${other}`) })
  await t.rejects(readAll(layerOf(written.path, {}, { blobSize: written.bytes + 1 })), { name: 'BadInputError', message: /blob is \d+ bytes but its descriptor says/ })
  await t.rejects(readAll(layerOf(written.path, {}, { diffId: other })), { name: 'BadInputError', message: new RegExp(`has diff_id ${written.diffId}, but the image config says ${other}`) })
  const ok = layerOf(written.path, {}, { blobDigest: written.digest as Digest, blobSize: written.bytes, diffId: written.diffId as Digest })
  await readAll(ok)
  t.equal(ok.diffId(), written.diffId)
})

t.test('TarLayerSource.entries() refuses GNU sparse files', async t => {
  const d = t.testdir({})
  writeFileSync(join(d, 'holes'), '')
  execFileSync('truncate', ['-s', '4M', join(d, 'holes')])
  execFileSync('tar', ['--format=gnu', '--sparse', '-C', d, '-cf', join(d, 'sparse.tar'), 'holes'])
  await t.rejects(readAll(layerOf(join(d, 'sparse.tar'))), { name: 'BadInputError', message: /entry "holes" at offset 0 is a GNU sparse file/ })
})

t.test('TarLayerSource.entries() stops a decompression bomb early, with bounded memory', async t => {
  const d = t.testdir({})
  // 16 GiB of zeros declared in one tar entry (4.7 GiB present), as many small compressed frames/members: a few MB on disk.
  const header = encodeHeader({ name: 'zeros', mode: 0o644, uid: 0, gid: 0, size: 16 * 1024 ** 3, mtime: 0, typeflag: '0' })
  const zeros = Buffer.alloc(8 * MIB)
  for (const [kind, member] of [['gzip', gzipSync(zeros, { level: 9 })], ['zstd', zstdBytes(zeros)]] as const) {
    const path = join(d, `bomb.${kind}`)
    const head = kind === 'gzip' ? gzipSync(header) : zstdBytes(header)
    writeFileSync(path, Buffer.concat([head, ...Array.from({ length: 600 }, () => member)]))
    const inputBytes = readFileSync(path).length
    const rssBefore = process.memoryUsage().rss
    const started = Date.now()
    await t.rejects(readAll(layerOf(path)), { name: 'LimitExceededError', message: /decompress to more than \d+ \(ratio above 200\); refusing a likely decompression bomb/ }, `${kind} bomb of ${inputBytes} bytes`)
    const ms = Date.now() - started
    t.ok(ms < 10_000, `${kind}: detected in ${ms} ms`)
    t.ok(process.memoryUsage().rss - rssBefore < 256 * MIB, `${kind}: memory stays bounded`)
  }
  const plain = join(d, 'plain.tar')
  writeFileSync(plain, buildLayerTar([file('a', { size: 2 * MIB })]))
  await t.rejects(readAll(layerOf(plain, { limits: { maxLayerBytes: MIB } })), { name: 'LimitExceededError', message: /decompresses to more than 1048576 bytes \(maxLayerBytes\)/ })
})

t.test('TarLayerSource errors are LayerdErrors, never raw', async t => {
  const d = t.testdir({})
  const path = join(d, 'x.tar')
  writeFileSync(path, buildLayerTar([file('a', 'a')]))
  const layer = new TarLayerSource({ name: 'tar gone.tar, layer 1 of 1', open: () => createReadStream(join(d, 'gone.tar')) }, ingestContext())
  await t.rejects(readAll(layer), { name: 'BadInputError', message: /tar gone\.tar, layer 1 of 1: cannot read the input: ENOENT/ })
  t.ok(BadInputError && LimitExceededError)
})
