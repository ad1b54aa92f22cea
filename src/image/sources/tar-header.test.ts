import t from 'tap'
import { execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { encodeHeader, encodePaxRecords, writeBase256, writeChecksum, FIELD } from '../../../fixtures/tar-header.js'
import { TarHeaderDecoder, TarSyntaxError, looksLikeTarHeader, parsePaxRecords, type HeaderResult } from './tar-header.js'

const base = { name: 'a.txt', mode: 0o644, uid: 1, gid: 2, size: 5, mtime: 1_700_000_000, typeflag: '0' as const }

function member (r: HeaderResult): Extract<HeaderResult, { kind: 'member' }>['member'] {
  if (r.kind !== 'member') throw new Error(`expected a member, got ${r.kind}`)
  return r.member
}

t.test('TarHeaderDecoder.header() decodes ustar fields and the prefix', async t => {
  const long = `${'p'.repeat(120)}/name.txt`
  const m = member(new TarHeaderDecoder().header(encodeHeader({ ...base, name: long, uname: 'u' }), 1024))
  t.match(m, { name: long, kind: 'file', mode: 0o644, uid: 1, gid: 2, size: 5, mtime: 1_700_000_000, offset: 1024, dataOffset: 1536 })
  t.equal(new TarHeaderDecoder().header(Buffer.alloc(512), 0).kind, 'zero')
})

t.test('TarHeaderDecoder.header() refuses a bad checksum, naming the offset', async t => {
  const block = encodeHeader(base)
  block[0] ^= 1
  t.throws(() => new TarHeaderDecoder().header(block, 4096), { message: /bad header checksum at offset 4096/, offset: 4096 })
  t.notOk(looksLikeTarHeader(block))
})

t.test('TarHeaderDecoder.header() refuses garbage in numeric fields and absurd base-256 sizes', async t => {
  const garbled = encodeHeader(base)
  garbled.write('12x4', FIELD.size[0], 'ascii')
  writeChecksum(garbled)
  t.throws(() => new TarHeaderDecoder().header(garbled, 0), { message: /invalid size field in the header at offset 0/ })

  const huge = encodeHeader(base)
  writeBase256(huge, FIELD.size[0], FIELD.size[1], 2n ** 60n)
  writeChecksum(huge)
  t.throws(() => new TarHeaderDecoder().header(huge, 512), TarSyntaxError)
  t.throws(() => new TarHeaderDecoder().header(huge, 512), { message: /absurd size \(beyond 2\^53\)/ })

  const big = encodeHeader(base)
  writeBase256(big, FIELD.size[0], FIELD.size[1], 2n ** 40n)
  writeChecksum(big)
  t.equal(member(new TarHeaderDecoder().header(big, 0)).size, 2 ** 40, 'large but sane base-256 sizes are read')

  const negative = encodeHeader({ ...base, mtime: -86_400 })
  t.equal(member(new TarHeaderDecoder().header(negative, 0)).mtime, -86_400, 'negative base-256 mtimes are read')
})

t.test('TarHeaderDecoder applies PAX records: path, size, ids, mtime, binary xattrs', async t => {
  const d = new TarHeaderDecoder()
  const cap = Buffer.from([1, 0, 0, 2, 0xff, 0x80])
  const pax = encodePaxRecords([['path', 'ünïcode/long'], ['uid', '3000000'], ['mtime', '1700000000.75'], ['SCHILY.xattr.security.capability', cap], ['LIBARCHIVE.xattr.user.a%20b', Buffer.from('aGk=')]])
  const r = d.header(encodeHeader({ name: 'PaxHeaders/x', mode: 0o644, uid: 0, gid: 0, size: pax.length, mtime: 0, typeflag: 'x' }), 0)
  t.same(r, { kind: 'extension', bodyBytes: pax.length })
  d.extensionBody(pax)
  const m = member(d.header(encodeHeader({ ...base, name: 'fallback' }), 1024))
  t.equal(m.name, 'ünïcode/long')
  t.equal(m.uid, 3_000_000)
  t.equal(m.mtime, 1_700_000_000)
  t.same(m.xattrs?.get('security.capability'), cap)
  t.same(m.xattrs?.get('user.a b'), Buffer.from('hi'))
  const next = member(d.header(encodeHeader({ ...base, name: 'plain' }), 2048))
  t.equal(next.name, 'plain', 'local PAX records apply to one entry only')
  t.equal(next.xattrs, undefined)
})

t.test('parsePaxRecords() refuses malformed records', async t => {
  t.throws(() => parsePaxRecords(Buffer.from('99 path=x\n'), 7), { message: /malformed PAX record in the extended header at offset 7/ })
  t.throws(() => parsePaxRecords(Buffer.from('9 pathx\n'), 0), TarSyntaxError)
  t.throws(() => parsePaxRecords(Buffer.from('abc path=x\n'), 0), TarSyntaxError)
  t.same([...parsePaxRecords(Buffer.concat([encodePaxRecords([['path', 'a']]), Buffer.alloc(20)]), 0).keys()], ['path'], 'NUL padding is tolerated')
})

t.test('TarHeaderDecoder refuses PAX sizes that parsers read differently', async t => {
  const d = new TarHeaderDecoder()
  const pax = encodePaxRecords([['size', '12abc']])
  d.header(encodeHeader({ name: 'P', mode: 0, uid: 0, gid: 0, size: pax.length, mtime: 0, typeflag: 'x' }), 0)
  d.extensionBody(pax)
  t.throws(() => d.header(encodeHeader(base), 1024), { message: /invalid PAX size "12abc"/ })
})

t.test('TarHeaderDecoder refuses data on header-only entries, unknown types, GNU sparse and non-UTF-8 names', async t => {
  t.throws(() => new TarHeaderDecoder().header(encodeHeader({ ...base, typeflag: '2', linkname: 't' }), 0), { message: /is a symlink with a non-zero size \(5\)/ })
  const volume = encodeHeader(base)
  volume.write('V', FIELD.typeflag[0], 'ascii')
  writeChecksum(volume)
  t.throws(() => new TarHeaderDecoder().header(volume, 0), { message: /unsupported type "V"/ })
  const sparse = encodeHeader(base)
  sparse.write('S', FIELD.typeflag[0], 'ascii')
  writeChecksum(sparse)
  t.throws(() => new TarHeaderDecoder().header(sparse, 0), { message: /GNU sparse file/ })
  const latin1 = encodeHeader(base)
  latin1.fill(0, 0, 100)
  Buffer.from([0x63, 0xe9, 0x2e, 0x74]).copy(latin1, 0)
  writeChecksum(latin1)
  t.throws(() => new TarHeaderDecoder().header(latin1, 0), { message: /entry name in the header at offset 0 is not valid UTF-8/ })
})

t.test('TarHeaderDecoder reads what GNU tar writes: long names (L/K), PAX sparse refused', async t => {
  const dir = t.testdir({})
  const src = join(dir, 'src')
  const longName = `${'n'.repeat(150)}/${'m'.repeat(120)}`
  mkdirSync(join(src, 'n'.repeat(150)), { recursive: true })
  writeFileSync(join(src, longName), 'data')
  execFileSync('ln', ['-s', 't'.repeat(150), join(src, 'link')])
  const tarFile = join(dir, 'gnu.tar')
  execFileSync('tar', ['--format=gnu', '-C', src, '-cf', tarFile, '.'])
  const names = decodeAll(readFileSync(tarFile)).map(m => [m.name, m.linkname])
  t.ok(names.some(([n]) => n === `./${longName}`), 'GNU long name')
  t.ok(names.some(([n, l]) => n === './link' && l === 't'.repeat(150)), 'GNU long link name')

  writeFileSync(join(src, 'holes'), '')
  execFileSync('truncate', ['-s', '8M', join(src, 'holes')])
  execFileSync('tar', ['--format=pax', '--sparse', '-C', src, '-cf', tarFile, 'holes'])
  t.throws(() => decodeAll(readFileSync(tarFile)), { message: /GNU sparse file/ })
})

/** Decode every member header of a tar buffer (test helper walking the framing). */
function decodeAll (tar: Buffer): Array<{ name: string, linkname: string }> {
  const d = new TarHeaderDecoder()
  const out = []
  let pos = 0
  while (pos < tar.length) {
    const r = d.header(tar.subarray(pos, pos + 512), pos)
    if (r.kind === 'zero') break
    if (r.kind === 'extension') {
      d.extensionBody(tar.subarray(pos + 512, pos + 512 + r.bodyBytes))
      pos += 512 + Math.ceil(r.bodyBytes / 512) * 512
      continue
    }
    out.push(r.member)
    pos = r.member.dataOffset + Math.ceil(r.member.size / 512) * 512
  }
  return out
}
