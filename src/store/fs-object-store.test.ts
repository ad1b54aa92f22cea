import t from 'tap'
import { spawn } from 'node:child_process'
import { readdir, rm, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { BadInputError, NotFoundError } from '../errors.js'
import { runObjectStoreConformance } from './conformance.js'
import { FsObjectStore, classifyFsError } from './fs-object-store.js'

let storeCount = 0

t.test('FsObjectStore passes the ObjectStore conformance suite', async t => {
  const base = t.testdir()
  runObjectStoreConformance(t, async () => ({ store: new FsObjectStore(join(base, `s${storeCount++}`)), cleanup: async () => {} }))
})

t.test('FsObjectStore without a handle cache passes the ObjectStore conformance suite', async t => {
  const base = t.testdir()
  runObjectStoreConformance(t, async () => ({ store: new FsObjectStore(join(base, `s${storeCount++}`), { handleCacheSize: 0 }), cleanup: async () => {} }))
})

t.test('FsObjectStore stores key a/b/c as the file <root>/a/b/c, and url is its file URL', async t => {
  const root = t.testdir()
  const store = new FsObjectStore(root)
  t.teardown(() => store.close())
  await store.put('a/b/c', Buffer.from('x'))
  t.equal((await stat(join(root, 'a/b/c'))).size, 1)
  t.equal(store.url, pathToFileURL(root).href)
  await t.rejects(store.get('nope'), { message: `object nope not found in store ${store.url}` })
})

t.test('FsObjectStore.put() leaves no temporary file behind', async t => {
  const root = t.testdir()
  const store = new FsObjectStore(root)
  t.teardown(() => store.close())
  await Promise.all(Array.from({ length: 20 }, async (_, i) => { await store.put(`blobs/k${i}`, Buffer.alloc(1000, i)) }))
  const names = await readdir(join(root, 'blobs'))
  t.equal(names.length, 20)
  t.notOk(names.some(n => n.startsWith('.tmp-')))
})

t.test('FsObjectStore ignores temporary files a crashed put left behind', async t => {
  const root = t.testdir({ blobs: { '.tmp-0123abcd': 'partial obj', done: 'complete' }, '.tmp-top': 'partial' })
  const store = new FsObjectStore(root)
  t.teardown(() => store.close())
  const listed: string[] = []
  for await (const key of store.list('')) listed.push(key)
  t.same(listed, ['blobs/done'])
  const inBlobs: string[] = []
  for await (const key of store.list('blobs/.tmp')) inBlobs.push(key)
  t.same(inBlobs, [])
  await t.rejects(store.get('blobs/.tmp-0123abcd'), BadInputError, 'temporary names are not keys')
  t.equal((await store.get('blobs/done')).toString(), 'complete')
})

t.test('FsObjectStore.put() killed mid-write never leaves a partial object', async t => {
  const root = t.testdir()
  const size = 64 * 1024 * 1024
  const moduleUrl = new URL('./fs-object-store.js', import.meta.url).href
  // A child process writes 64 MiB objects in a loop; we kill it at an arbitrary moment.
  const script = `
    const { FsObjectStore } = await import(${JSON.stringify(moduleUrl)})
    const store = new FsObjectStore(${JSON.stringify(root)})
    const data = Buffer.alloc(${size}, 0x61)
    process.stdout.write('ready\\n')
    for (let i = 0; ; i++) await store.put('blobs/big' + (i % 3), data)
  `
  for (const killAfterMs of [30, 120, 250]) {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
    await new Promise<void>(resolve => child.stdout.once('data', () => resolve()))
    await new Promise(resolve => setTimeout(resolve, killAfterMs))
    child.kill('SIGKILL')
    await new Promise(resolve => child.once('exit', resolve))
    const store = new FsObjectStore(root)
    for await (const key of store.list('blobs/')) {
      const st = await store.stat(key)
      t.equal(st?.size, size, `${key} is whole after a kill at ${killAfterMs} ms`)
    }
    await store.close()
  }
  // The loop is nearly always inside a put, so kills leave temporary files:
  // proof that puts were interrupted. They exist but are never listed.
  const names = await readdir(join(root, 'blobs'))
  t.ok(names.some(n => n.startsWith('.tmp-')), `interrupted puts left temporary files (${names.join(', ')})`)
})

t.test('FsObjectStore.put() of a key that collides with a key prefix throws BadInputError', async t => {
  const store = new FsObjectStore(t.testdir())
  t.teardown(() => store.close())
  await store.put('a/b', Buffer.from('x'))
  await t.rejects(store.put('a/b/c', Buffer.from('y')), BadInputError, 'an object cannot be a directory')
  await t.rejects(store.put('a', Buffer.from('y')), BadInputError, 'a directory cannot be an object')
  t.equal((await store.get('a/b')).toString(), 'x')
})

t.test('FsObjectStore.put() recreates a directory removed behind its back', async t => {
  const root = t.testdir()
  const store = new FsObjectStore(root)
  t.teardown(() => store.close())
  await store.put('blobs/one', Buffer.from('1'))
  await store.delete('blobs/one')
  await rm(join(root, 'blobs'), { recursive: true })
  await store.put('blobs/two', Buffer.from('2'))
  t.equal((await store.get('blobs/two')).toString(), '2')
})

t.test('FsObjectStore.getRange() sees a put() through this store, even with a cached handle', async t => {
  const store = new FsObjectStore(t.testdir())
  t.teardown(() => store.close())
  await store.put('k', Buffer.from('first value'))
  t.equal((await store.getRange('k', 0, 5)).toString(), 'first')
  await store.put('k', Buffer.from('other value'))
  t.equal((await store.getRange('k', 0, 5)).toString(), 'other')
  await store.delete('k')
  await t.rejects(store.getRange('k', 0, 5), NotFoundError)
})

t.test('FsObjectStore.getRange() with many keys keeps its handle cache bounded and correct', async t => {
  const store = new FsObjectStore(t.testdir(), { handleCacheSize: 4 })
  t.teardown(() => store.close())
  const keys = Array.from({ length: 12 }, (_, i) => `h/k${i}`)
  for (const key of keys) await store.put(key, Buffer.from(`value-${key}`))
  const reads = await Promise.all(Array.from({ length: 200 }, async (_, i) => {
    const key = keys[(i * 7) % keys.length] as string
    return [(await store.getRange(key, 6, key.length)).toString(), key]
  }))
  t.ok(reads.every(([got, key]) => got === key), '200 concurrent reads over 12 keys return the right bytes')
  const fds = await readdir('/proc/self/fd')
  t.ok(fds.length < 64, `open fds stay bounded (${fds.length})`)
})

t.test('classifyFsError() maps errno codes to LayerdErrors', async t => {
  const url = 'file:///s'
  const err = (code: string): Error => Object.assign(new Error(code), { code })
  t.equal(classifyFsError(err('ENOENT'), 'get', 'k', url).code, 'ERR_NOT_FOUND')
  t.equal(classifyFsError(err('ENOTDIR'), 'put', 'k', url).code, 'ERR_BAD_INPUT')
  t.equal(classifyFsError(err('EIO'), 'get', 'k', url).code, 'ERR_STORE_UNAVAILABLE')
  t.equal(classifyFsError(err('EMFILE'), 'getRange', 'k', url).code, 'ERR_STORE_UNAVAILABLE')
  t.equal(classifyFsError(err('ENOSPC'), 'put', 'k', url).code, 'ERR_LIMIT')
  t.equal(classifyFsError(err('EACCES'), 'put', 'k', url).code, 'ERR_USAGE')
  t.match(classifyFsError(err('EROFS'), 'put', 'blobs/x', url).message, 'cannot put blobs/x in store file:///s: the filesystem is read-only')
})

t.test('FsObjectStore whose root runs through a file fails with clear errors', async t => {
  const root = t.testdir()
  await writeFile(join(root, 'file'), 'x')
  const store = new FsObjectStore(join(root, 'file', 'store'))
  t.teardown(() => store.close())
  await t.rejects(store.put('k', Buffer.from('x')), BadInputError)
  await t.rejects(store.get('k'), NotFoundError)
})
