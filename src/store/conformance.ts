/**
 * The ObjectStore conformance suite: one set of tap tests that every
 * backend (memory, fs, s3) and decorator must pass. A backend's test file
 * calls runObjectStoreConformance() with a factory for fresh, empty stores.
 *
 * Only for tests: imports tap (types only) and is never loaded by the daemon.
 *
 * May import: src/errors.ts, ./object-store.ts, tap types.
 */
import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import {
  BadInputError, CorruptObjectError, NotFoundError, UsageError
} from '../errors.js'
import type { ListedObject, ObjectStore } from './object-store.js'

export interface StoreUnderTest {
  store: ObjectStore
  /** Removes whatever the store left behind; runs after the store's close(). */
  cleanup: () => Promise<void>
}

const MIB = 1024 * 1024
/** More than one S3 ListObjectsV2 page (1000 keys). */
const MANY_KEYS = 1100

/** Keys that are legal but easy to get wrong: encoded slashes, ':', spaces, unicode, URL syntax. */
export const UNUSUAL_KEYS = [
  'odd/refs/docker.io%2Flibrary%2Fpython/3.11-slim',
  'odd/colon:tag',
  'odd/space in name',
  'odd/plus+sign',
  'odd/query?x=1&y=2#frag',
  'odd/percent%25%zz',
  "odd/quote'\"~!*()",
  'odd/unicodé/日本語/ünïcødé-🙂',
  'odd/...dots',
  'odd/.hidden'
]

export const INVALID_KEYS = ['', '/abs', 'a//b', 'a/', '../x', 'a/../../x', 'a/./b', '.', 'nul\u0000byte', 'line\nbreak', '.tmp-x', 'a/.tmp-y', 'x'.repeat(256)]

/** Awaits `promise` and checks that it rejects with an instance of `Class` whose message matches. */
async function expectError (t: Test, promise: Promise<unknown>, Class: new (...args: never[]) => Error, message?: RegExp | string): Promise<void> {
  try {
    await promise
    t.fail(`expected ${Class.name}, but the call succeeded`)
  } catch (err) {
    t.ok(err instanceof Class, `throws ${Class.name}`, { found: err })
    if (message !== undefined && err instanceof Error) t.match(err.message, message)
  }
}

async function collect (iterable: AsyncIterable<string>): Promise<string[]> {
  const keys: string[] = []
  for await (const key of iterable) keys.push(key)
  return keys.sort()
}

async function collectObjects (iterable: AsyncIterable<ListedObject>): Promise<ListedObject[]> {
  const objects: ListedObject[] = []
  for await (const o of iterable) objects.push(o)
  return objects
}

/** Runs `fn` over `items`, at most `width` at a time. */
async function inBatches<T> (items: T[], width: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += width) await Promise.all(items.slice(i, i + width).map(fn))
}

/**
 * Adds the conformance tests to `t`. Each test gets its own store from
 * `makeStore` (a fresh, empty one) and closes and cleans it up after.
 * Synchronous: it only registers subtests.
 */
export interface ConformanceOptions {
  /**
   * Reasons to skip a test the store under test cannot pass for reasons
   * outside the backend (e.g. s3rver, unlike S3, does not replace objects
   * atomically). Printed as the skip reason.
   */
  skip?: { atomicOverwrite?: string }
}

export function runObjectStoreConformance (t: Test, makeStore: () => Promise<StoreUnderTest>, options: ConformanceOptions = {}): void {
  const withStore = (name: string, fn: (t: Test, store: ObjectStore) => Promise<void>, skip?: string): void => {
    t.test(name, skip === undefined ? {} : { skip }, async t => {
      const { store, cleanup } = await makeStore()
      t.teardown(async () => { await store.close(); await cleanup() })
      await fn(t, store)
    })
  }

  withStore('ObjectStore.put() then get() returns the same bytes: text, empty, binary, multi-MiB', async (t, store) => {
    const allBytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
    const big = randomBytes(5 * MIB + 7)
    const objects: Array<[string, Buffer]> = [['t/text', Buffer.from('hello\n')], ['t/empty', Buffer.alloc(0)], ['t/binary', allBytes], ['t/big', big]]
    for (const [key, data] of objects) await store.put(key, data)
    for (const [key, data] of objects) {
      const got = await store.get(key)
      t.ok(Buffer.isBuffer(got), `${key}: get() returns a Buffer`)
      t.ok(got.equals(data), `${key}: ${data.length} bytes round-trip`)
    }
  })

  withStore('ObjectStore.put() of parts stores them joined: views, empty parts, more parts than one writev takes', async (t, store) => {
    const base = randomBytes(3 * MIB + 5)
    // About 3,500 parts (IOV_MAX is 1,024), some empty, all views of one buffer at odd offsets.
    const parts: Uint8Array[] = []
    let at = 0
    for (let i = 0; at < base.length; i++) {
      const n = i % 7 === 0 ? 0 : Math.min(base.length - at, 1 + ((i * 2654435761) % 2100))
      parts.push(new Uint8Array(base.buffer, base.byteOffset + at, n))
      at += n
    }
    t.ok(parts.length > 1024, `${parts.length} parts, more than IOV_MAX`)
    await store.put('parts/big', parts)
    t.ok((await store.get('parts/big')).equals(base), `${base.length} bytes in ${parts.length} parts round-trip`)
    await store.put('parts/none', [])
    t.equal((await store.get('parts/none')).length, 0, 'no parts: an empty object')
    await store.put('parts/two', [Buffer.from('ab'), Buffer.from('cd')])
    t.equal((await store.getRange('parts/two', 1, 2)).toString(), 'bc', 'a range across two parts')
    t.equal((await store.stat('parts/two'))?.size, 4)
  })

  withStore('ObjectStore.put() copies its input and get() hands out a buffer the caller owns', async (t, store) => {
    const input = Buffer.from('original')
    await store.put('own/k', input)
    input.fill(0x78)
    const first = await store.get('own/k')
    t.equal(first.toString(), 'original', 'changing the input after put() changes nothing')
    first.fill(0x79)
    t.equal((await store.get('own/k')).toString(), 'original', 'changing a returned buffer changes nothing')
    const range = await store.getRange('own/k', 0, 4)
    range.fill(0x7a)
    t.equal((await store.getRange('own/k', 0, 4)).toString(), 'orig')
  })

  withStore('ObjectStore.put() overwrites an object, longer or shorter', async (t, store) => {
    await store.put('ow/k', Buffer.from('a much longer first value'))
    await store.put('ow/k', Buffer.from('short'))
    t.equal((await store.get('ow/k')).toString(), 'short')
    t.equal((await store.stat('ow/k'))?.size, 5)
    await store.put('ow/k', Buffer.from('longer than short'))
    t.equal((await store.get('ow/k')).toString(), 'longer than short')
    t.equal((await store.getRange('ow/k', 7, 4)).toString(), 'than')
  })

  withStore('ObjectStore.getRange() returns the start, middle, end and whole of an object', async (t, store) => {
    const data = randomBytes(1000)
    await store.put('r/k', data)
    for (const [offset, length] of [[0, 10], [400, 100], [990, 10], [0, 1000], [999, 1], [500, 0], [1000, 0]] as const) {
      const got = await store.getRange('r/k', offset, length)
      t.ok(got.equals(data.subarray(offset, offset + length)), `bytes ${offset}+${length}`)
    }
    const big = randomBytes(3 * MIB)
    await store.put('r/big', big)
    t.ok((await store.getRange('r/big', 2 * MIB - 5, MIB)).equals(big.subarray(2 * MIB - 5, 3 * MIB - 5)), '1 MiB from a 3 MiB object')
  })

  withStore('ObjectStore.getRange() past the end throws CorruptObjectError naming key and store', async (t, store) => {
    await store.put('r/short', Buffer.from('0123456789'))
    for (const [offset, length] of [[5, 10], [10, 1], [20, 5], [11, 0]] as const) {
      await expectError(t, store.getRange('r/short', offset, length), CorruptObjectError, new RegExp(`r/short.*${store.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`))
    }
    await expectError(t, store.getRange('r/short', -1, 2), BadInputError)
    await expectError(t, store.getRange('r/short', 0.5, 2), BadInputError)
  })

  withStore('ObjectStore.get() and getRange() of a missing key throw NotFoundError naming key and store', async (t, store) => {
    const message = `object miss/k not found in store ${store.url}`
    await expectError(t, store.get('miss/k'), NotFoundError, message)
    await expectError(t, store.getRange('miss/k', 0, 1), NotFoundError, message)
    await expectError(t, store.getRange('miss/k', 0, 0), NotFoundError, message)
    await store.put('miss/k/deeper', Buffer.from('x'))
    // A key prefix is not an object.
    await expectError(t, store.get('miss/k'), NotFoundError, message)
    await expectError(t, store.getRange('miss/k', 0, 1), NotFoundError, message)
  })

  withStore('ObjectStore.stat() gives the size, or undefined when missing', async (t, store) => {
    await store.put('s/one', Buffer.from('12345'))
    await store.put('s/empty', Buffer.alloc(0))
    await store.put('s/dir/child', Buffer.from('x'))
    const before = Date.now()
    t.match(await store.stat('s/one'), { size: 5, modified: Date })
    t.equal((await store.stat('s/empty'))?.size, 0)
    const modified = (await store.stat('s/one'))!.modified.getTime()
    t.ok(Math.abs(modified - before) < 60_000, 'modified is the store\'s time of the write (within a minute of this clock)')
    t.equal(await store.stat('s/missing'), undefined)
    t.equal(await store.stat('s/dir'), undefined, 'a key prefix is not an object')
  })

  withStore('ObjectStore.list() returns exactly the keys under a prefix', async (t, store) => {
    const keys = ['a/1', 'a/2', 'a/b/3', 'a/b/c/4', 'ab', 'abc/x', 'b']
    for (const key of keys) await store.put(key, Buffer.from(key))
    t.same(await collect(store.list('')), [...keys].sort(), 'empty prefix lists everything')
    t.same(await collect(store.list('a/')), ['a/1', 'a/2', 'a/b/3', 'a/b/c/4'], "'a/' does not list 'ab'")
    t.same(await collect(store.list('a')), ['a/1', 'a/2', 'a/b/3', 'a/b/c/4', 'ab', 'abc/x'], 'a partial name matches')
    t.same(await collect(store.list('ab')), ['ab', 'abc/x'])
    t.same(await collect(store.list('a/b')), ['a/b/3', 'a/b/c/4'])
    t.same(await collect(store.list('a/b/c/')), ['a/b/c/4'], 'nested prefix')
    t.same(await collect(store.list('a/1')), ['a/1'], 'a whole key is its own prefix')
    t.same(await collect(store.list('zzz')), [])
    t.same(await collect(store.list('nope/deeper/')), [])
    await expectError(t, collect(store.list('../')), BadInputError)
  })

  withStore('ObjectStore.listObjects() lists keys with their size and modification time; a rewrite moves it', async (t, store) => {
    await store.put('lo/a', Buffer.from('123'))
    await store.put('lo/b/c', Buffer.alloc(0))
    await store.put('lox', Buffer.from('x'))
    const listed = (await collectObjects(store.listObjects('lo/'))).sort((x, y) => x.key < y.key ? -1 : 1)
    t.same(listed.map(o => [o.key, o.size]), [['lo/a', 3], ['lo/b/c', 0]])
    t.ok(listed.every(o => o.modified instanceof Date && o.modified.getTime() > 0))
    const first = listed[0]!.modified.getTime()
    await new Promise(resolve => setTimeout(resolve, 1100)) // S3 LastModified has one-second resolution
    await store.put('lo/a', Buffer.from('4567'))
    const again = (await collectObjects(store.listObjects('lo/a')))[0]!
    t.equal(again.size, 4)
    t.ok(again.modified.getTime() > first, 'rewriting an object moves its modification time')
    t.equal(again.modified.getTime(), (await store.stat('lo/a'))!.modified.getTime(), 'stat and listObjects agree')
  })

  withStore(`ObjectStore.list() returns all of ${MANY_KEYS} keys (more than one S3 page)`, async (t, store) => {
    const keys = Array.from({ length: MANY_KEYS }, (_, i) => `many/k${String(i).padStart(5, '0')}`)
    await inBatches(keys, 32, async key => { await store.put(key, Buffer.from(key)) })
    await store.put('many2/outside', Buffer.from('x'))
    const listed = await collect(store.list('many/'))
    t.equal(listed.length, MANY_KEYS)
    t.same(listed, keys)
    const detailed = await collectObjects(store.listObjects('many/'))
    t.same(detailed.map(o => o.key).sort(), keys, 'listObjects() pages too')
  })

  withStore('ObjectStore.delete() removes an object, and a missing key is not an error', async (t, store) => {
    await store.put('d/k', Buffer.from('x'))
    await store.put('d/keep', Buffer.from('y'))
    await store.delete('d/k')
    await expectError(t, store.get('d/k'), NotFoundError)
    t.equal(await store.stat('d/k'), undefined)
    t.same(await collect(store.list('d/')), ['d/keep'])
    await store.delete('d/k')
    await store.delete('d/never/existed')
    await store.put('d/k', Buffer.from('again'))
    t.equal((await store.get('d/k')).toString(), 'again', 'a deleted key can be written again')
    t.equal((await store.getRange('d/k', 1, 3)).toString(), 'gai')
  })

  withStore('ObjectStore handles keys with unusual but legal characters', async (t, store) => {
    for (const key of UNUSUAL_KEYS) await store.put(key, Buffer.from(`value of ${key}`))
    for (const key of UNUSUAL_KEYS) {
      t.equal((await store.get(key)).toString(), `value of ${key}`, key)
      t.equal((await store.stat(key))?.size, Buffer.byteLength(`value of ${key}`))
    }
    t.same(await collect(store.list('odd/')), [...UNUSUAL_KEYS].sort())
    t.same(await collect(store.list('odd/refs/docker.io%2F')), [UNUSUAL_KEYS[0]], 'an encoded slash is not a separator')
  })

  withStore('ObjectStore rejects keys that could escape or collide with BadInputError', async (t, store) => {
    for (const key of INVALID_KEYS) {
      await expectError(t, store.put(key, Buffer.from('x')), BadInputError, /invalid object key/)
      await expectError(t, store.get(key), BadInputError)
      await expectError(t, store.getRange(key, 0, 1), BadInputError)
      await expectError(t, store.stat(key), BadInputError)
      await expectError(t, store.delete(key), BadInputError)
    }
    t.same(await collect(store.list('')), [], 'nothing was written')
  })

  withStore('ObjectStore.put() of many different keys at once stores each one', async (t, store) => {
    const objects = Array.from({ length: 48 }, (_, i) => [`c/${i % 4}/k${i}`, randomBytes(64 * 1024 + i)] as const)
    await Promise.all(objects.map(async ([key, data]) => { await store.put(key, data) }))
    for (const [key, data] of objects) t.ok((await store.get(key)).equals(data), key)
    t.equal((await collect(store.list('c/'))).length, objects.length)
  })

  withStore('ObjectStore readers see a whole old or whole new value while it is overwritten', async (t, store) => {
    const a = Buffer.alloc(2 * MIB, 0x61)
    const b = Buffer.alloc(2 * MIB + 4096, 0x62)
    await store.put('atomic/k', a)
    let torn = 0
    let reads = 0
    for (let round = 0; round < 6; round++) {
      let writing = true
      const write = store.put('atomic/k', round % 2 === 0 ? b : a).finally(() => { writing = false })
      // Readers keep reading for as long as the write is in flight.
      const reader = async (): Promise<void> => {
        do {
          const got = await store.get('atomic/k')
          reads++
          if (!got.equals(a) && !got.equals(b)) torn++
        } while (writing)
      }
      await Promise.all([write, reader(), reader()])
    }
    t.comment(`${reads} reads overlapped the writes`)
    t.equal(torn, 0, 'no read returned a mix or a prefix')
  }, options.skip?.atomicOverwrite)

  withStore('ObjectStore.close() can be called twice, and later calls throw UsageError', async (t, store) => {
    await store.put('cl/k', Buffer.from('x'))
    await store.getRange('cl/k', 0, 1)
    await store.close()
    await store.close()
    await expectError(t, store.get('cl/k'), UsageError, /closed/)
    await expectError(t, store.put('cl/k', Buffer.from('y')), UsageError, /closed/)
  })
}
