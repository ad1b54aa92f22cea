import t from 'tap'
import { readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { FileHandleCache } from './file-handle-cache.js'

const openFds = async (): Promise<number> => (await readdir('/proc/self/fd')).length

t.test('FileHandleCache.use() opens a path once and keeps at most `capacity` idle handles', async t => {
  const dir = t.testdir()
  const paths = await Promise.all(Array.from({ length: 6 }, async (_, i) => {
    const path = join(dir, `f${i}`)
    await writeFile(path, `content ${i}`)
    return path
  }))
  const before = await openFds()
  const cache = new FileHandleCache(3)
  const handles = new Set<number>()
  await Promise.all(Array.from({ length: 10 }, async () => cache.use(paths[0] as string, async h => { handles.add(h.fd) })))
  t.equal(handles.size, 1, 'ten concurrent uses of one path share one handle')
  for (const path of paths) await cache.use(path, async h => (await h.read(Buffer.alloc(9), 0, 9, 0)).bytesRead)
  t.equal(cache.size, 3)
  t.equal(await openFds(), before + 3, 'evicted handles are closed')
  await cache.close()
  await cache.close()
  t.equal(await openFds(), before, 'close() closes them all')
})

t.test('FileHandleCache keeps a handle open while a read uses it, even after eviction', async t => {
  const dir = t.testdir({ a: 'aaaa', b: 'bbbb' })
  const cache = new FileHandleCache(1)
  let release: () => void = () => {}
  const gate = new Promise<void>(resolve => { release = resolve })
  const slowRead = cache.use(join(dir, 'a'), async h => { await gate; return (await h.read(Buffer.alloc(4), 0, 4, 0)).buffer.toString() })
  await new Promise(resolve => setImmediate(resolve))
  await cache.use(join(dir, 'b'), async () => undefined) // evicts 'a' while in use
  cache.invalidate(join(dir, 'a'))
  release()
  t.equal(await slowRead, 'aaaa', 'the evicted handle still worked')
  await cache.close()
})

t.test('FileHandleCache.use() rejects with the open error and does not cache it', async t => {
  const dir = t.testdir({ later: 'x' })
  const cache = new FileHandleCache(4)
  await t.rejects(cache.use(join(dir, 'missing'), async () => undefined), { code: 'ENOENT' })
  t.equal(cache.size, 0)
  await writeFile(join(dir, 'missing'), 'now here')
  t.equal(await cache.use(join(dir, 'missing'), async h => (await h.stat()).size), 8)
  await cache.close()
})
