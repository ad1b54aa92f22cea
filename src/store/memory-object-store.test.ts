import t from 'tap'
import { runObjectStoreConformance } from './conformance.js'
import { MemoryObjectStore } from './memory-object-store.js'

t.test('MemoryObjectStore passes the ObjectStore conformance suite', async t => {
  runObjectStoreConformance(t, async () => ({ store: new MemoryObjectStore(), cleanup: async () => {} }))
})

t.test('MemoryObjectStore.url names the store for messages', async t => {
  const store = new MemoryObjectStore('unit')
  t.equal(store.url, 'memory://unit')
  await t.rejects(store.get('x'), { message: 'object x not found in store memory://unit' })
})
