import t from 'tap'
import { mergeLayers, type MergedInode } from '../format/merge.js'
import { CorruptObjectError } from '../errors.js'
import { FileReader, READAHEAD_CHUNKS } from './file-reader.js'
import { MemoryChunkReader } from './memory-chunk-reader.js'
import { MemoryImage, patternBytes } from './memory-image.js'

const CHUNK = 1000

function fixture (opts: { warm: boolean, stream?: boolean }): { image: MemoryImage, reader: MemoryChunkReader, files: FileReader, inode: (name: string) => MergedInode, content: Map<string, Buffer> } {
  const image = new MemoryImage()
  const content = new Map<string, Buffer>([
    ['big', patternBytes(10 * CHUNK + 7, 1)],
    ['a', patternBytes(300, 2)],
    ['b', patternBytes(1500, 3)],
    ['c', patternBytes(1, 4)],
    ['empty', Buffer.alloc(0)]
  ])
  image.addLayer([...content].map(([path, data]) => ({ path, type: 'file' as const, content: data })), { chunkSize: CHUNK, stream: opts.stream })
  const tree = mergeLayers(image.tocs)
  const reader = new MemoryChunkReader({ store: image.chunks, warm: opts.warm })
  return { image, reader, files: new FileReader(image.tocs, reader), inode: name => tree.root.children!.get(name)!.inode, content }
}

async function readAll (files: FileReader, inode: MergedInode, position: number, length: number): Promise<Buffer> {
  const out = Buffer.alloc(length)
  const n = await files.read(inode, position, length, out)
  return out.subarray(0, n)
}

t.test('FileReader.read() returns bytes synchronously when every chunk is cached', async t => {
  const { files, inode, content } = fixture({ warm: true })
  const out = Buffer.alloc(2 * CHUNK + 10)
  const n = files.read(inode('big'), CHUNK - 5, out.length, out)
  t.equal(n, out.length, 'a number, not a promise')
  t.same(out, content.get('big')!.subarray(CHUNK - 5, CHUNK - 5 + out.length))
  t.equal(files.counters.syncReads, 1)
  t.equal(files.counters.chunkMisses, 0)
  t.equal(files.counters.chunkHits, 4, 'chunks 0..3 each looked up once')
})

t.test('FileReader.read() is correct at every boundary, cold and warm, per-file and stream chunks', async t => {
  for (const warm of [false, true]) {
    for (const stream of [false, true]) {
      const { files, inode, content } = fixture({ warm, stream })
      const big = content.get('big')!
      const cases: Array<[number, number]> = [
        [0, 1], [0, CHUNK], [CHUNK - 1, 2], [CHUNK, CHUNK], [3 * CHUNK - 3, 2 * CHUNK + 6],
        [big.length - 1, 10], [big.length, 10], [big.length + 5000, 10], [0, big.length + 100], [5, 0]
      ]
      for (const [pos, len] of cases) {
        const got = await readAll(files, inode('big'), pos, len)
        t.same(got, big.subarray(Math.min(pos, big.length), Math.min(pos + len, big.length)), `big ${pos}+${len} warm=${warm} stream=${stream}`)
      }
      for (const name of ['a', 'b', 'c', 'empty']) {
        t.same(await readAll(files, inode(name), 0, 4096), content.get(name), `${name} whole, warm=${warm} stream=${stream}`)
        t.same(await readAll(files, inode(name), 1, 2), content.get(name)!.subarray(1, 3), `${name} middle`)
      }
    }
  }
})

t.test('FileReader.read() serves files that share a chunk (stream chunking) from one fetch', async t => {
  const { files, inode, content, reader, image } = fixture({ warm: false, stream: true })
  const toc = image.tocs[0]!
  const a = toc.entries.find(e => e.path === 'a')!
  const b = toc.entries.find(e => e.path === 'b')!
  t.equal(a.spans![0]!.chunk, b.spans![0]!.chunk, 'a and b start in the same chunk')
  t.not(b.spans![0]!.offset, 0, 'b starts inside that chunk')
  t.same(await readAll(files, inode('a'), 0, 300), content.get('a'))
  const fetchedBefore = reader.fetches.demand
  t.same(await readAll(files, inode('b'), 0, 50), content.get('b')!.subarray(0, 50))
  t.equal(reader.fetches.demand, fetchedBefore, 'b\'s first chunk was already cached by a\'s read')
})

t.test('FileReader.read() fetches only missing chunks and hints the next ones as prefetch', async t => {
  const { files, inode, content, reader } = fixture({ warm: false })
  const out = Buffer.alloc(10)
  const result = files.read(inode('big'), 0, 10, out)
  t.type(result, Promise, 'a miss returns a promise')
  t.equal(await result, 10)
  t.same(out, content.get('big')!.subarray(0, 10))
  t.equal(reader.fetches.demand, 1, 'one demand fetch for the one chunk')
  await new Promise(resolve => setImmediate(resolve))
  t.equal(reader.fetches.prefetch, Math.min(READAHEAD_CHUNKS, 10), 'the following chunks were hinted')
  t.equal(files.counters.fetchReads, 1)
  t.equal(files.counters.chunkMisses, 1)
  const again = Buffer.alloc(CHUNK)
  t.equal(files.read(inode('big'), CHUNK, CHUNK, again), CHUNK, 'a prefetched chunk is then a sync hit')
})

t.test('FileReader.read() rejects with the reader\'s error and missingChunks() names the chunk', async t => {
  const image = new MemoryImage()
  image.addLayer([{ path: 'f', type: 'file', content: patternBytes(2500, 9) }], { chunkSize: CHUNK })
  const bad = new Map(image.chunks)
  const firstDigest = image.tocs[0]!.chunks[0]!.digest
  bad.set(firstDigest, Buffer.from('not the chunk'))
  const reader = new MemoryChunkReader({ store: bad })
  const files = new FileReader(image.tocs, reader)
  const inode = mergeLayers(image.tocs).root.children!.get('f')!.inode
  await t.rejects(async () => await files.read(inode, 0, 100, Buffer.alloc(100)), CorruptObjectError)
  t.notOk(reader.cache.has(firstDigest), 'the corrupt chunk was not cached')
  t.same(files.missingChunks(inode, 0, 100), [`sha256:${firstDigest.slice(0, 12)}`])
  t.equal(await files.read(inode, CHUNK, 100, Buffer.alloc(100)), 100, 'other chunks still read')
})
