/**
 * MeteredObjectStore: counts every request to the store below by operation
 * and result (ok, not_found, error) in the process's plain counters
 * (src/metrics/counters.ts), which the daemon's /metrics reads at scrape
 * time. The daemon wraps each backend with it under the retrying layer, so
 * each attempt counts once.
 *
 * May import: src/errors.ts, src/metrics/counters.ts, ./object-store.ts.
 */
import { NotFoundError } from '../errors.js'
import { storeRequests, type StoreOpName } from '../metrics/counters.js'
import type { ObjectBody } from './object-body.js'
import type { ListedObject, ObjectStat, ObjectStore } from './object-store.js'

export class MeteredObjectStore implements ObjectStore {
  readonly url: string
  /** The inner store's: readahead is chosen by it (daemon/blob-neighbours.ts). */
  readonly remote: boolean
  readonly inner: ObjectStore

  constructor (inner: ObjectStore) {
    this.inner = inner
    this.url = inner.url
    this.remote = inner.remote
  }

  async get (key: string): Promise<Buffer> { return await count('get', this.inner.get(key)) }
  async getRange (key: string, offset: number, length: number): Promise<Buffer> { return await count('getRange', this.inner.getRange(key, offset, length)) }
  async put (key: string, data: ObjectBody): Promise<void> { await count('put', this.inner.put(key, data)) }
  async stat (key: string): Promise<ObjectStat | undefined> { return await count('stat', this.inner.stat(key)) }
  async * list (prefix: string): AsyncIterable<string> { yield * countListing(this.inner.list(prefix)) }
  async * listObjects (prefix: string): AsyncIterable<ListedObject> { yield * countListing(this.inner.listObjects(prefix)) }
  async delete (key: string): Promise<void> { await count('delete', this.inner.delete(key)) }
  async close (): Promise<void> { await this.inner.close() }
  async warm (): Promise<void> { await this.inner.warm?.() }
}

async function count<T> (op: StoreOpName, p: Promise<T>): Promise<T> {
  try {
    const v = await p
    storeRequests[op].ok++
    return v
  } catch (err) {
    storeRequests[op][err instanceof NotFoundError ? 'not_found' : 'error']++
    throw err
  }
}

async function * countListing<T> (it: AsyncIterable<T>): AsyncIterable<T> {
  try {
    yield * it
    storeRequests.list.ok++
  } catch (err) {
    storeRequests.list.error++
    throw err
  }
}
