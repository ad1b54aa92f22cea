import t from 'tap'
import { createHash } from 'node:crypto'
import { readTarRecords } from '../../fixtures/tar-reader.js'
import { TAR_BLOCK_BYTES, TAR_END, encodeTarHeader, padding, type TarHeader } from './tar-header.js'

const base: TarHeader = { name: 'etc/hosts', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 1_704_067_200, size: 0 }

/** Read `headers` back with the fixtures' independent tar reader. */
async function readBack (headers: TarHeader[]): Promise<Awaited<ReturnType<typeof collect>>> {
  const parts: Buffer[] = []
  for (const h of headers) {
    parts.push(encodeTarHeader(h))
    parts.push(Buffer.alloc(h.size, 0x61), Buffer.alloc(padding(h.size)))
  }
  parts.push(TAR_END)
  return await collect(Buffer.concat(parts))
}
async function collect (tar: Buffer): Promise<Array<{ name: string, typeflag: string, mode: number, uid: number, gid: number, mtime: number, size: number, linkname: string, devmajor: number, devminor: number, xattrs: Record<string, Buffer> }>> {
  const out = []
  for await (const r of readTarRecords([tar])) out.push(r.header)
  return out
}

t.test('encodeTarHeader() writes a plain ustar block for what ustar holds, and its bytes are pinned', async t => {
  const block = encodeTarHeader({ ...base, size: 3 })
  t.equal(block.length, TAR_BLOCK_BYTES, 'one block, no pax header')
  t.equal(createHash('sha256').update(block).digest('hex'), 'ad1cc0e38431fc5e85fdc48a17cb27ad88dfd23f5033e2eed9399efa33a49bcc')
  const [h] = await readBack([{ ...base, size: 3 }])
  t.match(h, { name: 'etc/hosts', typeflag: '0', mode: 0o644, uid: 0, gid: 0, mtime: 1_704_067_200, size: 3 })
})

t.test('encodeTarHeader() uses pax records for long or non-ASCII names, big ids, negative mtimes and binary xattrs', async t => {
  const longName = `${'d'.repeat(120)}/f`
  const capability = Buffer.from([0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0xff, 0x00])
  const headers: TarHeader[] = [
    { ...base, name: longName },
    { ...base, name: 'café/ünïcode' },
    { ...base, name: 'big-ids', uid: 0o7777777 + 1, gid: 4_000_000_000 },
    { ...base, name: 'old', mtime: -86_400 },
    { ...base, name: 'bin/ping', xattrs: new Map([['security.capability', capability], ['user.a', Buffer.from('x')]]) },
    { ...base, name: 'lnk', type: 'symlink', linkname: `/${'t'.repeat(150)}` },
    { ...base, name: 'usr', type: 'dir', mode: 0o755 },
    { ...base, name: 'dev/null', type: 'char', devMajor: 1, devMinor: 3 }
  ]
  const got = await readBack(headers)
  t.same(got.map(h => h.name), [longName, 'café/ünïcode', 'big-ids', 'old', 'bin/ping', 'lnk', 'usr/', 'dev/null'], 'a directory gets its trailing /')
  t.same([got[2]!.uid, got[2]!.gid], [0o7777777 + 1, 4_000_000_000])
  t.equal(got[3]!.mtime, -86_400)
  t.same(got[4]!.xattrs['security.capability'], capability, 'binary xattr bytes survive')
  t.same(got[4]!.xattrs['user.a'], Buffer.from('x'))
  t.equal(got[5]!.linkname, `/${'t'.repeat(150)}`)
  t.same([got[6]!.typeflag, got[7]!.typeflag, got[7]!.devmajor, got[7]!.devminor], ['5', '3', 1, 3])
})

t.test('padding() reaches the next block boundary; TAR_END is two zero blocks', async t => {
  t.same([0, 1, 511, 512, 513].map(padding), [0, 511, 1, 0, 511])
  t.equal(TAR_END.length, 2 * TAR_BLOCK_BYTES)
  t.ok(TAR_END.every(b => b === 0))
})
