/**
 * `layerctl df`, the store side: bytes and objects by kind, live (reachable
 * from a ref, its history included) against reclaimable (what `gc store
 * --grace 0` would delete now), dedup (plain bytes the live images hold
 * against distinct chunk bytes and stored blob bytes), and the dead bytes
 * inside live blobs (what compaction could reclaim).
 *
 * May import: src/format/, src/store/, src/image/, this folder.
 */
import { BLOBS_PREFIX } from '../format/keys.js'
import type { ObjectStore } from '../store/object-store.js'
import { inventory, kindOf, OBJECT_KINDS, StoreGraph, type ObjectKind } from './store-graph.js'

export interface KindUsage { objects: number, bytes: number, liveObjects: number, liveBytes: number, reclaimableObjects: number, reclaimableBytes: number }

export interface StoreUsage {
  store: string
  total: { objects: number, bytes: number }
  live: { objects: number, bytes: number }
  reclaimable: { objects: number, bytes: number }
  byKind: Record<ObjectKind, KindUsage>
  dedup: {
    /** File bytes of every live image version, each counted whole. */
    referencedPlainBytes: number
    /** Plain bytes of the distinct chunks those images use. */
    distinctPlainBytes: number
    /** Compressed bytes of live blobs. */
    storedBlobBytes: number
    /** referencedPlainBytes ÷ distinctPlainBytes. */
    dedupRatio: number
    /** referencedPlainBytes ÷ storedBlobBytes: dedup and compression together. */
    savingRatio: number
  }
  /** Compressed bytes of unreferenced chunks inside live blobs, and how many live blobs are over half dead. */
  deadBytesInLiveBlobs: number
  blobsOverHalfDead: number
  missing: string[]
}

/** Account the store. Async; one listing and one mark (reads every live manifest and TOC once). */
export async function storeUsage (store: ObjectStore): Promise<StoreUsage> {
  const objects = await inventory(store)
  const marked = await new StoreGraph(store).mark(objects)
  const byKind = Object.fromEntries(OBJECT_KINDS.map(k => [k, { objects: 0, bytes: 0, liveObjects: 0, liveBytes: 0, reclaimableObjects: 0, reclaimableBytes: 0 }])) as Record<ObjectKind, KindUsage>
  const total = { objects: 0, bytes: 0 }
  const live = { objects: 0, bytes: 0 }
  const reclaimable = { objects: 0, bytes: 0 }
  let storedBlobBytes = 0
  let dead = 0
  let overHalf = 0
  for (const [key, o] of objects) {
    const k = byKind[kindOf(key)]
    k.objects++; k.bytes += o.size
    total.objects++; total.bytes += o.size
    if (marked.live.has(key)) {
      k.liveObjects++; k.liveBytes += o.size
      live.objects++; live.bytes += o.size
      if (key.startsWith(BLOBS_PREFIX)) {
        storedBlobBytes += o.size
        const d = Math.max(0, o.size - (marked.liveChunkBytes.get(key.slice(BLOBS_PREFIX.length)) ?? 0))
        dead += d
        if (o.size > 0 && d / o.size > 0.5) overHalf++
      }
    } else {
      k.reclaimableObjects++; k.reclaimableBytes += o.size
      reclaimable.objects++; reclaimable.bytes += o.size
    }
  }
  const ratio = (a: number, b: number): number => b === 0 ? 0 : a / b
  return {
    store: store.url,
    total,
    live,
    reclaimable,
    byKind,
    dedup: {
      referencedPlainBytes: marked.referencedPlainBytes,
      distinctPlainBytes: marked.distinctPlainBytes,
      storedBlobBytes,
      dedupRatio: ratio(marked.referencedPlainBytes, marked.distinctPlainBytes),
      savingRatio: ratio(marked.referencedPlainBytes, storedBlobBytes)
    },
    deadBytesInLiveBlobs: dead,
    blobsOverHalfDead: overHalf,
    missing: marked.missing
  }
}
