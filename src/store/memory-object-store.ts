/**
 * MemoryObjectStore: an ObjectStore held in a Map, for unit tests and
 * benchmarks that must not touch disk. Same key rules and errors as the real
 * backends (it passes conformance.ts). Data is copied on put and on read, so
 * neither side can change the other's bytes.
 *
 * May import: src/errors.ts, ./object-store.ts, ./object-key.ts.
 */
import { CorruptObjectError, NotFoundError, UsageError } from '../errors.js'
import { bodyBytes, type ObjectBody } from './object-body.js'
import type { ListedObject, ObjectStat, ObjectStore } from './object-store.js'
import {
  assertValidKey, assertValidPrefix, assertValidRange, notFoundMessage, shortObjectMessage
} from './object-key.js'

let nextStoreId = 1

export class MemoryObjectStore implements ObjectStore {
  readonly url: string
  readonly remote = false
  readonly #objects = new Map<string, Buffer>()
  readonly #modified = new Map<string, Date>()
  #closed = false

  /** `name` only appears in the store's url (`memory://<name>`), for messages. */
  constructor (name = `store-${nextStoreId++}`) {
    this.url = `memory://${name}`
  }

  /** Number of objects held; for tests. */
  get size (): number { return this.#objects.size }

  async get (key: string): Promise<Buffer> {
    return Buffer.from(this.#lookup('get', key))
  }

  async getRange (key: string, offset: number, length: number): Promise<Buffer> {
    this.#assertOpen('getRange')
    assertValidRange(key, offset, length, this.url)
    const data = this.#lookup('getRange', key)
    if (offset + length > data.length) {
      throw new CorruptObjectError(shortObjectMessage(key, this.url, offset, length, Math.max(0, data.length - offset)))
    }
    return Buffer.from(data.subarray(offset, offset + length))
  }

  async put (key: string, data: ObjectBody): Promise<void> {
    this.#assertOpen('put')
    assertValidKey(key, this.url)
    this.#objects.set(key, Buffer.from(bodyBytes(data)))
    this.#modified.set(key, new Date())
  }

  async stat (key: string): Promise<ObjectStat | undefined> {
    this.#assertOpen('stat')
    assertValidKey(key, this.url)
    const data = this.#objects.get(key)
    return data === undefined ? undefined : { size: data.length, modified: this.#modified.get(key)! }
  }

  async * list (prefix: string): AsyncIterable<string> {
    this.#assertOpen('list')
    assertValidPrefix(prefix, this.url)
    // A snapshot, so puts and deletes during iteration do not disturb it.
    for (const key of [...this.#objects.keys()]) {
      if (key.startsWith(prefix)) yield key
    }
  }

  async * listObjects (prefix: string): AsyncIterable<ListedObject> {
    for await (const key of this.list(prefix)) {
      const data = this.#objects.get(key)
      if (data !== undefined) yield { key, size: data.length, modified: this.#modified.get(key)! }
    }
  }

  async delete (key: string): Promise<void> {
    this.#assertOpen('delete')
    assertValidKey(key, this.url)
    this.#objects.delete(key)
    this.#modified.delete(key)
  }

  async close (): Promise<void> {
    this.#closed = true
  }

  #lookup (op: string, key: string): Buffer {
    this.#assertOpen(op)
    assertValidKey(key, this.url)
    const data = this.#objects.get(key)
    if (data === undefined) throw new NotFoundError(notFoundMessage(key, this.url))
    return data
  }

  #assertOpen (op: string): void {
    if (this.#closed) throw new UsageError(`cannot ${op}: store ${this.url} is closed`)
  }
}
