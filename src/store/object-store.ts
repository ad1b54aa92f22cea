/**
 * The object store: where all authoritative state lives.
 *
 * Backends (MemoryObjectStore, FsObjectStore, S3ObjectStore) implement one
 * attempt of each operation and classify their failures into LayerdErrors.
 * Retries and digest verification live once, above them
 * (retrying-object-store.ts, src/image/). Every backend passes
 * store/conformance.ts. S3ObjectStore reads through s3-http-reader.ts
 * (plain keep-alive HTTP, signed by sigv4.ts) when its credentials are
 * static, and through the AWS SDK otherwise.
 *
 * Keys follow object-key.ts (`/`-separated components; no empty, `.` or `..`
 * component, no control characters, no `.tmp-` component prefix, at most
 * 1024 bytes): every method throws BadInputError for a key that breaks them.
 * After close(), every method but close() throws UsageError.
 *
 * May import: src/errors.ts, src/format/. Nothing above it.
 */
import type { ObjectBody } from './object-body.js'

export interface ObjectStat {
  size: number
  /**
   * When the object was last written, by the store's clock (S3
   * `LastModified`, the file's mtime). Garbage collection compares these
   * with each other only, never with a node's clock.
   */
  modified: Date
}

/** One object of a detailed listing. */
export interface ListedObject extends ObjectStat {
  key: string
}

export interface ObjectStore {
  /** Where this store is, for messages: `file:///…` or `s3://bucket/prefix`. */
  readonly url: string

  /**
   * A capability: true when a read costs a network round trip (S3), so
   * readers should ask for more per request (blob-neighbour readahead);
   * false for a local store. Decorators report their inner store's. Not
   * optional, so that a decorator that forgets to pass it on does not
   * compile (MeteredObjectStore once did, and the daemon read S3 with the
   * local readahead).
   */
  readonly remote: boolean

  /**
   * The whole object. Async. The returned buffer is owned by the caller.
   * Throws NotFoundError when the key does not exist, StoreUnavailableError
   * when the store cannot be reached or fails.
   */
  get (key: string): Promise<Buffer>

  /**
   * `length` bytes starting at `offset`. Async. Throws NotFoundError for a
   * missing key and CorruptObjectError when the object is shorter than the
   * range asked for (a store that lies about a blob).
   */
  getRange (key: string, offset: number, length: number): Promise<Buffer>

  /**
   * Write the whole object atomically: readers see either nothing (or the
   * previous value) or all of `data`, never a prefix. `data` is one buffer
   * or the object's parts in order (object-body.ts). Async. `data` is not
   * used once the promise settles.
   */
  put (key: string, data: ObjectBody): Promise<void>

  /** Size of the object, or undefined when it does not exist. Async. */
  stat (key: string): Promise<ObjectStat | undefined>

  /** Every key that starts with `prefix`, in no particular order. */
  list (prefix: string): AsyncIterable<string>

  /**
   * Like list(), with each object's size and modification time (S3: the
   * same paged ListObjectsV2 calls; fs: one lstat per file). Objects written
   * or deleted during the listing may or may not appear.
   */
  listObjects (prefix: string): AsyncIterable<ListedObject>

  /** Remove the object. Removing a missing key is not an error. Async. */
  delete (key: string): Promise<void>

  /** Release connections and handles. Idempotent; later calls to other methods throw UsageError. */
  close (): Promise<void>

  /**
   * Optional: do now the one-time work that the first request would
   * otherwise pay (S3: load the SDK, build its client, resolve the
   * credentials), so a daemon that is up but idle serves its first mount at
   * full speed. Async; never throws (a store that cannot be reached fails on
   * its first real request, as before). Decorators pass it to their inner
   * store.
   */
  warm?: () => Promise<void>
}
