import t from 'tap'
import { execFileSync } from 'node:child_process'
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildLayerTar, file, hardlink, symlink } from '../../../fixtures/layer-dsl.js'
import { TarIndex } from './tar-index.js'

const SCAN = { maxMembers: 1000 }

async function text (index: TarIndex, name: string): Promise<string | undefined> {
  const m = index.resolveFile(name)
  return m === undefined ? undefined : (await index.read(m, 1 << 20)).toString()
}

async function streamText (index: TarIndex, name: string): Promise<string> {
  const chunks: Buffer[] = []
  for await (const c of index.open(index.resolveFile(name)!)) chunks.push(c as Buffer)
  return Buffer.concat(chunks).toString()
}

t.test('TarIndex.scan() indexes a GNU tar with long names, PAX records and links', async t => {
  const dir = t.testdir({})
  const src = join(dir, 'src')
  const longDir = 'd'.repeat(180)
  mkdirSync(join(src, longDir, 'sub'), { recursive: true })
  writeFileSync(join(src, longDir, 'sub', 'layer.tar'), 'layer bytes')
  writeFileSync(join(src, 'manifest.json'), '[]')
  writeFileSync(join(src, 'empty'), '')
  symlinkSync(`../${longDir}/sub/layer.tar`, join(src, longDir, 'link.tar'))
  mkdirSync(join(src, 'x'))
  symlinkSync(`../${longDir}/link.tar`, join(src, 'x', 'chain.tar'))
  for (const format of ['gnu', 'pax', 'ustar']) {
    if (format === 'ustar') continue // ustar cannot hold a 180-byte component
    const tarFile = join(dir, `${format}.tar`)
    execFileSync('tar', [`--format=${format}`, '-C', src, '-cf', tarFile, '.'])
    const index = (await TarIndex.scan(tarFile, SCAN))!
    t.equal(await text(index, 'manifest.json'), '[]', `${format}: small member`)
    t.equal(await text(index, `${longDir}/sub/layer.tar`), 'layer bytes', `${format}: long name`)
    t.equal(await text(index, `${longDir}/link.tar`), 'layer bytes', `${format}: symlink member resolved`)
    t.equal(await text(index, 'x/chain.tar'), 'layer bytes', `${format}: chain of symlinks resolved`)
    t.equal(await streamText(index, `${longDir}/link.tar`), 'layer bytes', `${format}: ranged stream`)
    t.equal(await streamText(index, 'empty'), '', `${format}: empty member`)
    t.equal(index.resolveFile('missing'), undefined)
    t.equal(index.member(`${longDir}/link.tar`)?.kind, 'symlink')
  }
})

t.test('TarIndex.resolveFile() follows hardlinks and never leaves the archive', async t => {
  const dir = t.testdir({})
  const path = join(dir, 'a.tar')
  writeFileSync(path, buildLayerTar([
    file('a/layer.tar', 'data'),
    hardlink('b/layer.tar', 'a/layer.tar'),
    symlink('c/layer.tar', '../../../../etc/passwd'),
    symlink('d/layer.tar', '/etc/passwd'),
    symlink('loop1', 'loop2'),
    symlink('loop2', 'loop1')
  ]))
  const index = (await TarIndex.scan(path, SCAN))!
  t.equal(await text(index, 'b/layer.tar'), 'data')
  t.throws(() => index.resolveFile('c/layer.tar'), { name: 'BadInputError', message: /member "c\/layer\.tar" is a symlink to "\.\.\/\.\.\/\.\.\/\.\.\/etc\/passwd", outside the archive/ })
  t.throws(() => index.resolveFile('d/layer.tar'), { name: 'BadInputError', message: /symlink to the absolute path "\/etc\/passwd"/ })
  t.throws(() => index.resolveFile('loop1'), { name: 'BadInputError', message: /chain of more than 16 links/ })
})

t.test('TarIndex.scan() refuses truncated, duplicate and traversing archives', async t => {
  const dir = t.testdir({})
  const tar = buildLayerTar([file('manifest.json', 'x'.repeat(3000)), file('b', 'b')])
  const cases: Array<[string, Buffer, RegExp]> = [
    ['truncated', tar.subarray(0, 2048), /member "manifest\.json" extends past the end of the file \(truncated\?\)/],
    ['duplicate', buildLayerTar([file('manifest.json', 'a'), file('./manifest.json', 'b')]), /member "manifest\.json" appears twice/],
    ['traversal', buildLayerTar([file('../x', 'a')]), /member "\.\.\/x" contains a '\.\.' component/],
    ['corrupt header', Buffer.concat([tar.subarray(0, 512 * 7), Buffer.alloc(512, 7), tar.subarray(512 * 8)]), /archive .*: bad header checksum at offset 3584/]
  ]
  for (const [what, bytes, message] of cases) {
    const path = join(dir, 'x.tar')
    writeFileSync(path, bytes)
    await t.rejects(TarIndex.scan(path, SCAN), { name: 'BadInputError', message }, what)
  }
  const many = join(dir, 'many.tar')
  writeFileSync(many, buildLayerTar(Array.from({ length: 20 }, (_, i) => file(`f${i}`, ''))))
  await t.rejects(TarIndex.scan(many, { maxMembers: 10 }), { name: 'LimitExceededError', message: /more than 10 members/ })
})

t.test('TarIndex.scan() stops at the first member the caller rejects', async t => {
  const dir = t.testdir({})
  const path = join(dir, 'rootfs.tar')
  // The second member is corrupt, but the scan never gets there.
  const tar = buildLayerTar([file('bin/sh', 'sh'), file('etc/x', 'x')])
  tar.fill(9, 1024, 1536)
  writeFileSync(path, tar)
  const seen: string[] = []
  t.equal(await TarIndex.scan(path, { maxMembers: 10, accept: n => { seen.push(n); return n === 'manifest.json' } }), undefined)
  t.same(seen, ['bin/sh'])
  t.ok(readFileSync(path).length > 0)
})
