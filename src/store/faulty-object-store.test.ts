import t from 'tap'
import { NotFoundError, StoreUnavailableError, UsageError } from '../errors.js'
import { runObjectStoreConformance } from './conformance.js'
import { FaultyObjectStore } from './faulty-object-store.js'
import { MemoryObjectStore } from './memory-object-store.js'

t.test('FaultyObjectStore with no rules passes the ObjectStore conformance suite', async t => {
  runObjectStoreConformance(t, async () => ({ store: new FaultyObjectStore(new MemoryObjectStore()), cleanup: async () => {} }))
})

t.test('FaultyObjectStore.counters count successful calls and bytes', async t => {
  const store = new FaultyObjectStore(new MemoryObjectStore())
  await store.put('a', Buffer.alloc(100))
  await store.put('b', Buffer.alloc(30))
  await store.get('a')
  await store.getRange('a', 10, 20)
  await store.stat('b')
  await store.get('missing').catch(() => undefined)
  for await (const key of store.list('')) t.ok(key)
  await store.delete('b')
  t.same(store.counters, {
    gets: 1, getRanges: 1, puts: 2, stats: 1, lists: 1, deletes: 1, bytesPut: 130, bytesGot: 120, injectedFailures: 0, injectedCorruptions: 0
  })
  t.same(store.putKeys, ['a', 'b'])
  store.resetCounters()
  t.equal(store.counters.puts, 0)
  t.same(store.putKeys, [])
})

t.test('FaultyObjectStore fails the Nth matching call only', async t => {
  const store = new FaultyObjectStore(new MemoryObjectStore(), { rules: [{ ops: ['put'], skip: 2, times: 1 }] })
  await store.put('k1', Buffer.from('1'))
  await store.get('k1')
  await store.put('k2', Buffer.from('2'))
  await t.rejects(store.put('k3', Buffer.from('3')), StoreUnavailableError, 'the 3rd put fails')
  await t.rejects(store.get('k3'), NotFoundError, 'a failed put stores nothing')
  await store.put('k4', Buffer.from('4'))
  t.same(store.putKeys, ['k1', 'k2', 'k4'])
  t.equal(store.counters.injectedFailures, 1)
})

t.test('FaultyObjectStore fails every call after the first N', async t => {
  const store = new FaultyObjectStore(new MemoryObjectStore('after-n'))
  store.addFault({ skip: 3 })
  await store.put('a', Buffer.from('a'))
  await store.get('a')
  await store.stat('a')
  await t.rejects(store.get('a'), { message: 'cannot get a in store memory://after-n: injected failure' })
  await t.rejects(store.delete('a'), StoreUnavailableError)
  await t.rejects((async () => { for await (const key of store.list('')) t.fail(key) })(), StoreUnavailableError)
  store.clearFaults()
  t.equal((await store.get('a')).toString(), 'a')
})

t.test('FaultyObjectStore fails puts under a key prefix, with a chosen error', async t => {
  const store = new FaultyObjectStore(new MemoryObjectStore(), {
    rules: [{ ops: ['put'], keyPrefix: 'blobs/', error: (op, key) => new UsageError(`no ${op} of ${key}`) }]
  })
  await store.put('layers/x', Buffer.from('x'))
  await t.rejects(store.put('blobs/y', Buffer.from('y')), { name: 'UsageError', message: 'no put of blobs/y' })
  t.same(store.putKeys, ['layers/x'])
})

t.test("FaultyObjectStore 'after' failures store the object, then throw (a lost acknowledgement)", async t => {
  const store = new FaultyObjectStore(new MemoryObjectStore(), { rules: [{ ops: ['put'], when: 'after', times: 1 }] })
  await t.rejects(store.put('k', Buffer.from('stored')), StoreUnavailableError)
  t.equal((await store.get('k')).toString(), 'stored')
  t.equal(store.counters.puts, 1)
})

t.test('FaultyObjectStore corrupts the bytes get() and getRange() return for a key', async t => {
  const inner = new MemoryObjectStore()
  const store = new FaultyObjectStore(inner, { rules: [{ ops: ['get', 'getRange'], keyPrefix: 'blobs/bad', effect: 'corrupt' }] })
  const data = Buffer.from('0123456789')
  await store.put('blobs/bad', data)
  await store.put('blobs/good', data)
  const got = await store.get('blobs/bad')
  t.equal(got.length, data.length)
  t.notOk(got.equals(data), 'get() is corrupted')
  t.notOk((await store.getRange('blobs/bad', 2, 4)).equals(data.subarray(2, 6)), 'getRange() is corrupted')
  t.ok((await store.get('blobs/good')).equals(data), 'other keys are not')
  t.ok((await inner.get('blobs/bad')).equals(data), 'the stored object is intact')
  t.equal(store.counters.injectedCorruptions, 2)
})

t.test('FaultyObjectStore.latencyMs delays every call', async t => {
  const store = new FaultyObjectStore(new MemoryObjectStore(), { latencyMs: 30 })
  const started = Date.now()
  await store.put('k', Buffer.from('x'))
  await store.get('k')
  t.ok(Date.now() - started >= 55, `two calls took ${Date.now() - started} ms`)
})
