import t from 'tap'
import { CorruptObjectError, NotFoundError, StoreUnavailableError } from '../errors.js'
import { runObjectStoreConformance } from './conformance.js'
import { FaultyObjectStore } from './faulty-object-store.js'
import { MemoryObjectStore } from './memory-object-store.js'
import { RetryingObjectStore, type RetryEvent } from './retrying-object-store.js'

const FAST = { baseDelayMs: 1, maxDelayMs: 5 }

function setup (options = {}): { faulty: FaultyObjectStore, store: RetryingObjectStore, retries: RetryEvent[] } {
  const faulty = new FaultyObjectStore(new MemoryObjectStore())
  const retries: RetryEvent[] = []
  const store = new RetryingObjectStore(faulty, { ...FAST, onRetry: e => retries.push(e), ...options })
  return { faulty, store, retries }
}

t.test('RetryingObjectStore passes the ObjectStore conformance suite', async t => {
  runObjectStoreConformance(t, async () => ({ store: new RetryingObjectStore(new MemoryObjectStore(), FAST), cleanup: async () => {} }))
})

t.test('RetryingObjectStore.get() retries StoreUnavailableError until a call succeeds', async t => {
  const { faulty, store, retries } = setup()
  await store.put('k', Buffer.from('value'))
  faulty.addFault({ ops: ['get', 'getRange', 'put', 'stat', 'delete'], times: 2 })
  t.equal((await store.get('k')).toString(), 'value')
  t.equal(faulty.counters.injectedFailures, 2)
  t.same(retries.map(r => [r.op, r.key, r.attempt]), [['get', 'k', 1], ['get', 'k', 2]])
  faulty.addFault({ ops: ['put'], times: 1 })
  await store.put('k2', Buffer.from('x'))
  t.same(faulty.putKeys, ['k', 'k2'], 'the failed put was retried once, and stored once')
})

t.test('RetryingObjectStore does not retry NotFoundError, CorruptObjectError or bad keys', async t => {
  const { faulty, store, retries } = setup()
  await t.rejects(store.get('missing'), NotFoundError)
  await t.rejects(store.getRange('missing', 0, 1), NotFoundError)
  await store.put('short', Buffer.from('abc'))
  await t.rejects(store.getRange('short', 2, 5), CorruptObjectError)
  await t.rejects(store.get('../escape'), { code: 'ERR_BAD_INPUT' })
  faulty.addFault({ ops: ['get'], error: () => new CorruptObjectError('injected corrupt') })
  await t.rejects(store.get('short'), CorruptObjectError)
  t.equal(retries.length, 0)
  t.equal(faulty.counters.injectedFailures, 1, 'one attempt only')
})

t.test('RetryingObjectStore gives up after maxAttempts with StoreUnavailableError', async t => {
  const { faulty, store, retries } = setup({ maxAttempts: 4 })
  faulty.addFault({})
  const err = await store.stat('k').catch((e: unknown) => e)
  t.ok(err instanceof StoreUnavailableError)
  t.match((err as Error).message, /injected failure \(gave up after 4 attempts in \d+ ms\)/)
  t.ok((err as Error).cause instanceof StoreUnavailableError, 'the last failure is the cause')
  t.equal(faulty.counters.injectedFailures, 4)
  t.equal(retries.length, 3)
})

t.test('RetryingObjectStore gives up at its deadline, whatever maxAttempts says', async t => {
  const { faulty, store } = setup({ maxAttempts: 1_000_000, baseDelayMs: 10, maxDelayMs: 40, deadlineMs: 300 })
  faulty.addFault({})
  const started = Date.now()
  await t.rejects(store.get('k'), StoreUnavailableError)
  const ms = Date.now() - started
  // 1,000,000 attempts at up to 40 ms apart would take hours: a few seconds of slack still proves the deadline.
  t.ok(ms <= 300 + 2000, `gave up after ${ms} ms (deadline 300 ms)`)
  t.ok(faulty.counters.injectedFailures > 3, `after ${faulty.counters.injectedFailures} attempts`)
})

t.test('RetryingObjectStore backs off exponentially with jitter, capped at maxDelayMs', async t => {
  const { faulty, store, retries } = setup({ maxAttempts: 8, baseDelayMs: 8, maxDelayMs: 64 })
  faulty.addFault({ times: 7 })
  await store.get('k').catch(() => undefined)
  const delays = retries.map(r => r.delayMs)
  t.equal(delays.length, 7)
  delays.forEach((delay, i) => {
    const step = Math.min(64, 8 * 2 ** i)
    t.ok(delay >= step / 2 && delay <= step, `retry ${i + 1}: ${delay} ms within [${step / 2}, ${step}]`)
  })
})

t.test('RetryingObjectStore.list() restarts a failed listing without repeating keys', async t => {
  const { faulty, store, retries } = setup()
  for (const key of ['l/a', 'l/b', 'l/c', 'm/x']) await store.put(key, Buffer.from(key))
  let failedOnce = false
  // Fail the listing after it yielded two keys: wrap the inner list.
  const innerList = faulty.list.bind(faulty)
  faulty.list = async function * (prefix: string) {
    let n = 0
    for await (const key of innerList(prefix)) {
      if (n++ === 2 && !failedOnce) { failedOnce = true; throw new StoreUnavailableError('injected mid-list') }
      yield key
    }
  }
  const keys: string[] = []
  for await (const key of store.list('l/')) keys.push(key)
  t.same(keys.sort(), ['l/a', 'l/b', 'l/c'])
  t.equal(retries.length, 1)
  faulty.addFault({ ops: ['list'], times: 1 })
  const again: string[] = []
  for await (const key of store.list('')) again.push(key)
  t.equal(again.length, 4, 'a listing that fails before its first key is retried')
})
