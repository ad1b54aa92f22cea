/**
 * Refs: `NAME:TAG` → current manifest, with the history of earlier versions.
 * A ref is written last by every command that changes an image, so nothing
 * half-made is ever reachable by name.
 *
 * Concurrency: read-modify-write without a lock; two pushes to the same tag at
 * the same instant keep the last writer (documented in the README).
 *
 * May import: src/errors.ts, src/format/, src/store/.
 */
import { NotFoundError } from '../errors.js'
import type { Digest } from '../format/digest.js'
import { REFS_PREFIX, refFromKey, refKey } from '../format/keys.js'
import { decodeRefRecord, encodeJson, type RefRecord, type RefVersion } from '../format/manifest.js'
import { formatRef, type ImageRef } from '../format/ref.js'
import type { ObjectStore } from '../store/object-store.js'

/** Versions kept per ref; older ones drop off the history (their objects stay in the store). */
export const MAX_REF_HISTORY = 200

/** The ref's record, or undefined when the ref does not exist. Async. */
export async function readRef (store: Pick<ObjectStore, 'get' | 'url'>, ref: ImageRef): Promise<RefRecord | undefined> {
  const key = refKey(ref)
  try {
    return decodeRefRecord(await store.get(key), `${formatRef(ref)} (${key} in ${store.url})`)
  } catch (err) {
    if (err instanceof NotFoundError) return undefined
    throw err
  }
}

/** The manifest digest a ref names now. Throws NotFoundError naming the ref and the store. */
export async function resolveRef (store: Pick<ObjectStore, 'get' | 'url'>, ref: ImageRef): Promise<Digest> {
  const record = await readRef(store, ref)
  if (record === undefined) throw new NotFoundError(`image ${formatRef(ref)} not found in store ${store.url}`)
  return record.history[0]!.manifest
}

/**
 * Point the ref at `manifest` (pushed from `source`, when given), keeping
 * the previous versions. A no-op when it already does, from the same source.
 */
export async function updateRef (store: Pick<ObjectStore, 'get' | 'put' | 'url'>, ref: ImageRef, manifest: Digest, now = new Date(), source?: RefVersion['source']): Promise<RefRecord> {
  const current = await readRef(store, ref)
  const head = current?.history[0]
  if (head?.manifest === manifest && (source === undefined || JSON.stringify(head.source) === JSON.stringify(source))) return current!
  const version: RefVersion = { manifest, at: now.toISOString(), ...(source === undefined ? {} : { source }) }
  const record: RefRecord = {
    name: ref.name,
    tag: ref.tag,
    history: [version, ...(current?.history ?? [])].slice(0, MAX_REF_HISTORY)
  }
  await store.put(refKey(ref), encodeJson(record))
  return record
}

/** Remove a ref (not the objects it names). Throws NotFoundError when it does not exist. */
export async function deleteRef (store: Pick<ObjectStore, 'get' | 'delete' | 'url'>, ref: ImageRef): Promise<void> {
  if (await readRef(store, ref) === undefined) throw new NotFoundError(`image ${formatRef(ref)} not found in store ${store.url}`)
  await store.delete(refKey(ref))
}

/** Every ref in the store, sorted by name then tag. */
export async function listRefs (store: Pick<ObjectStore, 'list'>): Promise<ImageRef[]> {
  const refs: ImageRef[] = []
  for await (const key of store.list(REFS_PREFIX)) {
    const ref = refFromKey(key)
    if (ref !== undefined) refs.push(ref)
  }
  return refs.sort((a, b) => a.name === b.name ? (a.tag < b.tag ? -1 : 1) : (a.name < b.name ? -1 : 1))
}
