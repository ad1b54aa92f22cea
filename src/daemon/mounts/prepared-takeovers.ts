/**
 * PreparedTakeovers: the trees and metadata tables of the connections an
 * earlier daemon kept, built before this daemon takes them over. A planned
 * restart (`layerctl daemon restart`) starts the new daemon while the old
 * one still serves; everything a takeover computes from the mounts' TOCs
 * (decode, merge or stack split, the view, the kernel table and its
 * sha256) is done here, in that time, so that once the old daemon has gone
 * only the attach is left (issue 19: the readers' stall per restart).
 *
 * Input: each kept connection's record in `<home>/connections.json`
 * (src/holder/connection-keeper.ts) with its TreeSource: the store and the
 * layers its tree was built from. The TOCs are read from the store itself,
 * verified (the chunk cache belongs to the serving daemon until it goes,
 * lmdb-chunk-cache.ts), so a planned restart on S3 reads the mounted
 * layers' TOCs once more. A prepared tree is used only when its table's
 * digest is the record's (so it is the table the connection was served
 * from), and only by the mount of the same mountpoint and layers
 * (take()); anything else takes the usual path. Never throws: a record it
 * cannot prepare is logged and left to the usual path.
 *
 * May import: src/errors.ts, src/format/, src/store/, src/image/, src/fs/, src/holder/connection-keeper.ts.
 */
import { describeError } from '../../errors.js'
import type { Digest } from '../../format/digest.js'
import { mergeLayers, type MergedTree } from '../../format/merge.js'
import { splitTopLayer } from '../../format/layer-split.js'
import type { LayerToc } from '../../format/toc.js'
import type { ObjectStore } from '../../store/object-store.js'
import { getToc } from '../../image/metadata-objects.js'
import { ImageView } from '../../fs/image-view.js'
import { encodeKernelFuseTable } from '../../fs/kernel-fuse-table.js'
import { tableDigest } from '../../fs/kernel-fuse.js'
import type { PreparedTree } from '../../fs/image-mount.js'
import type { ConnectionRecord, TreeSource } from '../../fs/kernel-fuse-keeper.js'
import type { LogLine } from '../../log-line.js'

interface Prepared extends PreparedTree { layers: string[], base?: string[] }

/** Opens the store a record names (the daemon's stores are not open yet). */
export type StoreOpener = (loc: { store: string, s3Endpoint?: string }) => ObjectStore

export class PreparedTakeovers {
  readonly #byMountpoint: Map<string, Prepared>
  /** Decoded TOCs by layer digest: the ones the prepared trees hold. */
  readonly #tocs: Map<string, LayerToc>
  /** How many records were prepared, and the ms it took. */
  readonly count: number
  readonly ms: number
  /** How many take() handed out. */
  taken = 0

  private constructor (prepared: Map<string, Prepared>, tocs: Map<string, LayerToc>, ms: number) {
    this.#byMountpoint = prepared
    this.#tocs = tocs
    this.count = prepared.size
    this.ms = ms
  }

  /** None prepared (a daemon not started for a takeover). */
  static none (): PreparedTakeovers { return new PreparedTakeovers(new Map(), new Map(), 0) }

  /**
   * Build the tree and table of every record that names its source and
   * whose mountpoint `isMounted` (after a reboot the records are still there,
   * their mounts are not: nothing to take over). Async; never rejects
   * (failures are logged per record). Stores opened here are closed before it resolves.
   */
  static async prepare (records: readonly ConnectionRecord[], openStore: StoreOpener, log: LogLine,
    isMounted: (mountpoint: string) => Promise<boolean> = async () => true): Promise<PreparedTakeovers> {
    const started = performance.now()
    const stores = new Map<string, ObjectStore>()
    /** By store and layer: a layer one store lacks may be in another. */
    const tocs = new Map<string, { layer: string, toc: Promise<LayerToc> }>()
    const merged = new Map<string, MergedTree>()
    const prepared = new Map<string, Prepared>()
    const tocOf = (source: TreeSource, layer: string): Promise<LayerToc> => {
      const key = `${source.store} ${source.s3Endpoint ?? ''}`
      let toc = tocs.get(`${key}\n${layer}`)
      if (toc === undefined) {
        let store = stores.get(key)
        if (store === undefined) stores.set(key, store = openStore({ store: source.store, ...(source.s3Endpoint === undefined ? {} : { s3Endpoint: source.s3Endpoint }) }))
        toc = { layer, toc: getToc(store, layer as Digest) }
        toc.toc.catch(() => {}) // awaited by its record, which logs the failure
        tocs.set(`${key}\n${layer}`, toc)
      }
      return toc.toc
    }
    const mergeOf = (layers: string[], decoded: LayerToc[]): MergedTree => {
      const key = layers.join('\n')
      let tree = merged.get(key)
      if (tree === undefined) merged.set(key, tree = mergeLayers(decoded))
      return tree
    }
    for (const record of records) {
      const source = record.source
      if (source === undefined || !(await isMounted(record.mountpoint).catch(() => false))) continue
      try {
        const layerTocs = await Promise.all(source.layers.map(l => tocOf(source, l)))
        let tree: MergedTree
        if (source.base === undefined) {
          tree = mergeOf(source.layers, layerTocs)
        } else {
          const base = mergeOf(source.base, await Promise.all(source.base.map(l => tocOf(source, l))))
          const split = splitTopLayer(base, layerTocs[0]!)
          if ('reason' in split) throw new Error(`its top layer cannot be split off: ${split.reason}`)
          tree = split.tree
        }
        const view = new ImageView(tree)
        const table = encodeKernelFuseTable(view)
        const digest = tableDigest(table.bytes)
        if (digest !== record.tableDigest) throw new Error(`this daemon builds another table (sha256 ${digest.slice(0, 16)}…, served from ${record.tableDigest.slice(0, 16)}…)`)
        prepared.set(record.mountpoint, { tree, view, table, digest, layers: source.layers, ...(source.base === undefined ? {} : { base: source.base }) })
      } catch (err) {
        log(`preparing the takeover of ${record.mountpoint}: ${describeError(err)}; it is built at the takeover`, 'warn')
      }
      // Let the serving daemon's other work (and this one's timers) run between records.
      await new Promise(resolve => setImmediate(resolve))
    }
    for (const store of stores.values()) await store.close().catch(() => {})
    const decoded = new Map<string, LayerToc>()
    for (const { layer, toc } of tocs.values()) {
      try { decoded.set(layer, await toc) } catch {} // a failed TOC was logged with its record
    }
    return new PreparedTakeovers(prepared, decoded, Math.round(performance.now() - started))
  }

  /**
   * The prepared tree of `mountpoint` if it was built from exactly `layers`
   * (and, for a stack's top, split off `base`); handed out once. Sync.
   */
  take (mountpoint: string, layers: readonly string[], base?: readonly string[]): PreparedTree | undefined {
    const p = this.#byMountpoint.get(mountpoint)
    if (p === undefined || !sameList(p.layers, layers) || !sameList(p.base, base)) return undefined
    this.#byMountpoint.delete(mountpoint)
    this.taken++
    return p
  }

  /** The decoded TOC of `layer`, if a prepared tree holds it. Sync. */
  toc (layer: string): LayerToc | undefined { return this.#tocs.get(layer) }

  /** Forget everything not taken (after the takeover). Sync. */
  clear (): void {
    this.#byMountpoint.clear()
    this.#tocs.clear()
  }
}

function sameList (a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  if (a === undefined || b === undefined) return a === b
  return a.length === b.length && a.every((x, i) => x === b[i])
}
