/**
 * Access traces shared between nodes through the image's store
 * (src/image/published-traces.ts): a node publishes what its mounts of an
 * image read first, and a mount elsewhere prefetches that published trace.
 *
 * May import: src/errors.ts, src/format/ (types), src/image/, src/store/ (types), this folder.
 */
import { NotFoundError } from '../../errors.js'
import type { ChunkRef } from '../../format/toc.js'
import type { LoadedImage } from '../../image/load-image.js'
import { getPublishedTrace, putPublishedTrace } from '../../image/published-traces.js'
import type { ObjectStore } from '../../store/object-store.js'
import type { AccessTraces } from './access-traces.js'
import type { LogLine } from '../../log-line.js'

/** What publishing a trace wrote: the image's manifest, the trace's key in the store, its chunks. */
export interface PublishedTrace { manifest: string, key: string, chunks: number }

/**
 * The published access trace of `loaded`, or undefined when there is none or
 * it cannot be read: it is only a hint, so a failure is logged and the
 * mount goes on. Async; never rejects.
 */
export async function readPublishedTrace (store: Pick<ObjectStore, 'get' | 'url'>, loaded: LoadedImage, log: LogLine): Promise<ChunkRef[] | undefined> {
  try {
    return await getPublishedTrace(store, loaded.digest, loaded.tocs)
  } catch (err) {
    log(`published access trace of ${loaded.digest}: ${(err as Error).message}`, 'warn')
    return undefined
  }
}

/**
 * Publish this node's access trace of `loaded` (named `image` in messages)
 * to `store`. Async. Throws NotFoundError when this node has no trace of it
 * (a trace is saved when a mount of the image ends); errors of the store as
 * putPublishedTrace().
 */
export async function publishNodeTrace (store: Pick<ObjectStore, 'put'>, traces: Pick<AccessTraces, 'load'>, image: string, loaded: LoadedImage): Promise<PublishedTrace> {
  const trace = traces.load(loaded.digest)
  if (trace.length === 0) throw new NotFoundError(`cannot publish a trace of ${image}: no mount of it (manifest ${loaded.digest}) has ended on this node yet, so there is no access trace to publish`)
  const { key, chunks } = await putPublishedTrace(store, loaded.digest, loaded.tocs, trace)
  return { manifest: loaded.digest, key, chunks }
}
