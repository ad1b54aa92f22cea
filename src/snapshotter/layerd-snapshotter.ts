/**
 * LayerdSnapshotter: containerd's snapshotter semantics, as its overlayfs
 * snapshotter has them, plus remote snapshots.
 *
 * - An ordinary snapshot is a directory `<root>/snapshots/<id>/fs` (and
 *   `work` for an active one). Active snapshots mount as overlays of their
 *   `fs` (upper) over their committed parents (lower, nearest first); a
 *   snapshot without parent mounts as a bind of its `fs`. containerd
 *   unpacks the layers it pulled into them, and Commit keeps the directory
 *   under the new name.
 * - A remote snapshot is a committed snapshot whose `fs` is a lazy FUSE
 *   mount of layerd layers: its own layer, stacked over the node's shared
 *   mount of the layers below it (so images on one base share its page
 *   cache), or the chain from the bottom layer to it merged, when the layer
 *   cannot be stacked (RemoteLayers.mount says which: the lower dirs):
 *   Prepare with `containerd.io/snapshot.ref` = TARGET, a parent that is
 *   none or remote, and a layer that `RemoteLayers.resolve` finds, commits
 *   TARGET at once and answers ALREADY_EXISTS (containerd's
 *   remote-snapshotter protocol). The mount is made when a child first
 *   needs it as its lower (or a view of it), not at Prepare.
 * - Keys are opaque: containerd's metadata store namespaces them
 *   (`<ns>/<n>/<key>`) and keeps its own names; its GC removes through
 *   Remove what no namespace references.
 *
 * May import: src/errors.ts, src/format/ (types), this folder.
 */
import { mkdirSync } from 'node:fs'
import { lstat, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { NotFoundError, UsageError, describeError } from '../errors.js'
import { AlreadyExistsError, FailedPreconditionError, InvalidArgumentError } from './snapshot-errors.js'
import { snapshotFilter } from './snapshot-filters.js'
import { ContainerdSnapshotTable, type RemoteChain, type SnapshotKind, type SnapshotRecord } from '../state/containerd-snapshot-table.js'
import type { LogLine } from '../log-line.js'

/** containerd's label naming the committed snapshot a Prepare may resolve to (remote-snapshotter protocol). */
export const TARGET_SNAPSHOT_REF_LABEL = 'containerd.io/snapshot.ref'
/** Set on the snapshots layerd serves remotely (lazily), with the layer's TOC digest as value. */
export const REMOTE_SNAPSHOT_LABEL = 'containerd.io/snapshot/layerd.remote'

/** One mount as containerd's `types.Mount` carries it. */
export interface SnapshotMount { type: string, source: string, target: string, options: string[] }

export interface SnapshotInfo {
  name: string
  parent: string
  kind: SnapshotKind
  labels: Record<string, string>
  createdAt: Date
  updatedAt: Date
}

export interface SnapshotUsage { size: number, inodes: number }

/** The lazy side: finding layers in layerd's store and mounting them. */
export interface RemoteLayers {
  /**
   * The chain a remote snapshot prepared with `labels` over `parent` would
   * show (parent's chain plus the layer the labels name), or undefined when
   * layerd does not hold that layer (the snapshot is then ordinary). Async;
   * never throws for "not held".
   */
  resolve: (labels: Record<string, string>, parent: SnapshotRecord | undefined) => Promise<RemoteChain | undefined>
  /**
   * Mount `chain` read-only at `mountpoint` (an existing empty directory).
   * Resolves to the read-only directories that show the chain, nearest
   * first, for the lowerdir of an overlay over it: the mountpoint, and, when
   * the chain is served stacked, the shared mount of its lower layers. Async.
   */
  mount: (chain: RemoteChain, mountpoint: string) => Promise<string[]>
  /** The directories (as mount() resolved to) of the chain layerd serves at `mountpoint`, or undefined when it serves none there. Sync. */
  lowerDirs: (mountpoint: string) => string[] | undefined
  /** Detach the mount at `mountpoint`, if any. Async; never throws for "not mounted". */
  unmount: (mountpoint: string) => Promise<void>
  /**
   * What the top layer of `chain` holds, as an unpacked snapshot of it would
   * count it: its regular files' bytes and its entries (from its TOC). Async.
   */
  layerUsage: (chain: RemoteChain) => Promise<SnapshotUsage>
}

export interface SnapshotterOptions {
  /** Directory holding `snapshots/<id>`. */
  root: string
  records: ContainerdSnapshotTable
  remote: RemoteLayers
  log: LogLine
}

export class LayerdSnapshotter {
  readonly #root: string
  readonly #records: ContainerdSnapshotTable
  readonly #remote: RemoteLayers
  readonly #log: LogLine
  readonly #mounting = new Map<string, Promise<string[]>>()

  constructor (opts: SnapshotterOptions) {
    this.#root = opts.root
    this.#records = opts.records
    this.#remote = opts.remote
    this.#log = opts.log
    if (/[,:\\\s]/.test(opts.root)) throw new UsageError(`snapshotter root ${JSON.stringify(opts.root)} cannot go into overlay mount options (',', ':', '\\' or space in it)`)
    mkdirSync(join(opts.root, 'snapshots'), { recursive: true, mode: 0o700 })
  }

  /** `<root>/snapshots/<id>`. */
  dirOf (id: number): string { return join(this.#root, 'snapshots', String(id)) }

  /**
   * An active snapshot `key` over committed `parent` (or none), or, when the
   * labels ask for a remote snapshot that layerd can serve, the committed
   * target: then throws AlreadyExistsError. Async. Throws AlreadyExistsError
   * for a taken key, NotFoundError for a missing parent,
   * InvalidArgumentError for an uncommitted one.
   */
  async prepare (key: string, parent: string, labels: Record<string, string>): Promise<SnapshotMount[]> {
    const parentRecord = this.#checkNew(key, parent)
    const target = labels[TARGET_SNAPSHOT_REF_LABEL]
    if (target !== undefined && target !== '' && (parentRecord === undefined || parentRecord.remote !== undefined)) {
      await this.#tryRemote(target, parent, parentRecord, labels)
    }
    return await this.#create(key, parent, 'active', labels)
  }

  /** A read-only view `key` of committed `parent` (or an empty one). Async; errors as prepare(). */
  async view (key: string, parent: string, labels: Record<string, string>): Promise<SnapshotMount[]> {
    this.#checkNew(key, parent)
    return await this.#create(key, parent, 'view', labels)
  }

  /** The mounts of active or view snapshot `key`. Async; NotFoundError, FailedPreconditionError for a committed one. */
  async mounts (key: string): Promise<SnapshotMount[]> {
    const r = this.#get(key)
    if (r.kind === 'committed') throw new FailedPreconditionError(`snapshot ${key} is committed: only active snapshots and views have mounts`)
    return await this.#mountsOf(r)
  }

  /**
   * Commit active `key` as `name` (its directory is kept), with `labels`.
   * Sync. Throws NotFoundError, FailedPreconditionError for a view or
   * committed snapshot, AlreadyExistsError when `name` is taken.
   */
  commit (name: string, key: string, labels: Record<string, string>): void {
    const r = this.#get(key)
    if (r.kind !== 'active') throw new FailedPreconditionError(`cannot commit ${key}: it is a ${r.kind} snapshot, not an active one`)
    if (name === '') throw new InvalidArgumentError(`cannot commit ${key}: the name is empty`)
    if (this.#records.get(name) !== undefined) throw new AlreadyExistsError(`cannot commit ${key} as ${name}: snapshot ${name} already exists`)
    this.#records.commit(key, name, labels)
  }

  /**
   * Remove `key` and its directory (a remote snapshot's mount is detached
   * first). Async. Throws NotFoundError, FailedPreconditionError while
   * other snapshots have it as parent.
   */
  async remove (key: string): Promise<void> {
    const r = this.#get(key)
    const children = this.#records.children(key)
    if (children > 0) throw new FailedPreconditionError(`cannot remove snapshot ${key}: ${children} snapshot(s) have it as parent`)
    if (r.remote !== undefined) {
      const mountpoint = join(this.dirOf(r.id), 'fs')
      await this.#mounting.get(mountpoint)?.catch(() => {}) // a mount started ahead (warm) ends before the unmount
      await this.#remote.unmount(mountpoint)
    }
    this.#records.delete(key)
    try {
      await rm(this.dirOf(r.id), { recursive: true, force: true })
    } catch (err) {
      this.#log(`snapshot ${key} removed; its directory ${this.dirOf(r.id)} is left for cleanup: ${describeError(err)}`, 'warn')
    }
  }

  /** Info of `key`. Sync; NotFoundError. */
  stat (key: string): SnapshotInfo { return infoOf(this.#get(key)) }

  /**
   * Update the labels of `info.name`: all of them without `paths`, else the
   * ones named `labels` (all) or `labels.KEY`. Other fields are immutable.
   * Sync; NotFoundError, InvalidArgumentError for another path.
   */
  update (info: { name: string, labels: Record<string, string> }, paths: readonly string[]): SnapshotInfo {
    const r = this.#get(info.name)
    let labels = { ...r.labels }
    if (paths.length === 0 || paths.includes('labels')) {
      labels = { ...info.labels }
    } else {
      for (const p of paths) {
        if (!p.startsWith('labels.')) throw new InvalidArgumentError(`cannot update field ${JSON.stringify(p)} of snapshot ${info.name}: only labels are mutable`)
        const k = p.slice('labels.'.length)
        const v = info.labels[k]
        if (v === undefined || v === '') delete labels[k]
        else labels[k] = v
      }
    }
    this.#records.setLabels(r.key, labels)
    return infoOf(this.#get(r.key))
  }

  /** Snapshots matching any of `filters` (containerd filter syntax, subset: see snapshot-filters.ts). Sync. */
  list (filters: readonly string[]): SnapshotInfo[] {
    const match = snapshotFilter(filters)
    return this.#records.all().map(infoOf).filter(match)
  }

  /**
   * Usage of `key`'s own layer. An ordinary snapshot: its directory's disk
   * use, bytes (st_blocks) and inodes. A remote snapshot: its layer's file
   * bytes and entries as its TOC lists them, what the overlayfs snapshotter
   * would report for that layer unpacked (so image sizes containerd and CRI
   * sum from snapshots agree across snapshotters), not the node's disk:
   * its chunks live in the shared cache, fetched on demand. Async.
   */
  async usage (key: string): Promise<SnapshotUsage> {
    const r = this.#get(key)
    if (r.remote !== undefined) return await this.#remote.layerUsage(r.remote)
    return await diskUsage(join(this.dirOf(r.id), 'fs'))
  }

  /**
   * Remove directories of snapshots that no longer exist (a Remove that
   * could not delete, a crash between row and directory). Async; never
   * throws for one directory, logs it.
   */
  async cleanup (): Promise<{ removed: number }> {
    // The directories first, then the rows: a snapshot's row and directory appear in one synchronous step
    // (#create), so every directory listed here that is live has its row by now. The other order removed
    // the directory of a snapshot prepared while readdir ran (containerd's GC cleans up while containers start).
    const names = await readdir(join(this.#root, 'snapshots'))
    const known = new Set(this.#records.all().map(r => String(r.id)))
    let removed = 0
    for (const name of names) {
      if (known.has(name)) continue
      const dir = join(this.#root, 'snapshots', name)
      try {
        await this.#remote.unmount(join(dir, 'fs'))
        await rm(dir, { recursive: true, force: true })
        removed++
      } catch (err) {
        this.#log(`cleanup of ${dir}: ${describeError(err)}`, 'warn')
      }
    }
    return { removed }
  }

  /**
   * After a daemon restart: mount again the remote snapshots that active
   * snapshots or views stand on, so their Mounts (a container started
   * again) work. Async; never throws, logs failures.
   */
  async recover (): Promise<number> {
    let mounted = 0
    for (const r of this.#records.all()) {
      if (r.kind === 'committed' || r.parent === '') continue
      const p = this.#records.get(r.parent)
      if (p?.remote === undefined) continue
      try { await this.#ensureMounted(p); mounted++ } catch (err) { this.#log(`remounting remote snapshot ${p.key}: ${describeError(err)}`, 'warn') }
    }
    return mounted
  }

  /**
   * Mount now, in the background, the remote snapshot committed for chain
   * `target` (the top layer of an image just pulled), so the first
   * container's Prepare finds it mounted. Sync; starts it and returns. Does
   * nothing when no remote snapshot has that target; a failed mount is
   * logged, and the container's Prepare mounts again.
   */
  warm (target: string): void {
    const r = this.#records.all().find(x => x.remote !== undefined && x.kind === 'committed' && x.labels[TARGET_SNAPSHOT_REF_LABEL] === target)
    if (r === undefined) return
    this.#ensureMounted(r).catch(err => { this.#log(`mounting remote snapshot ${r.key} ahead of its first container: ${describeError(err)}`, 'warn') })
  }

  #get (key: string): SnapshotRecord {
    const r = this.#records.get(key)
    if (r === undefined) throw new NotFoundError(`snapshot ${key} does not exist`)
    return r
  }

  #checkNew (key: string, parent: string): SnapshotRecord | undefined {
    if (key === '') throw new InvalidArgumentError('snapshot key is empty')
    if (this.#records.get(key) !== undefined) throw new AlreadyExistsError(`snapshot ${key} already exists`)
    if (parent === '') return undefined
    const p = this.#records.get(parent)
    if (p === undefined) throw new NotFoundError(`parent snapshot ${parent} of ${key} does not exist`)
    if (p.kind !== 'committed') throw new InvalidArgumentError(`parent snapshot ${parent} of ${key} is not committed`)
    return p
  }

  /** Commit `target` remotely when layerd holds its layer; then throws AlreadyExistsError. Returns when it cannot. */
  async #tryRemote (target: string, parent: string, parentRecord: SnapshotRecord | undefined, labels: Record<string, string>): Promise<void> {
    const existing = this.#records.get(target)
    if (existing !== undefined) {
      if (existing.kind === 'committed' && existing.remote !== undefined && existing.parent === parent) throw new AlreadyExistsError(`target snapshot ${target} already exists (served by layerd)`)
      return // the name is taken by something else: the ordinary path
    }
    let chain: RemoteChain | undefined
    try {
      chain = await this.#remote.resolve(labels, parentRecord)
    } catch (err) {
      this.#log(`remote snapshot ${target}: layerd cannot serve it (${describeError(err)}); preparing an ordinary snapshot`, 'warn')
      return
    }
    if (chain === undefined) return
    const layer = chain.layers.at(-1)!
    try {
      this.#records.insert({ key: target, parent, kind: 'committed', labels: { ...labels, [TARGET_SNAPSHOT_REF_LABEL]: target, [REMOTE_SNAPSHOT_LABEL]: layer }, remote: chain },
        id => mkdirSync(join(this.dirOf(id), 'fs'), { recursive: true, mode: 0o755 }))
    } catch (err) {
      if (this.#records.get(target) === undefined) throw err // a concurrent Prepare of the same target may have won: fine
    }
    throw new AlreadyExistsError(`target snapshot ${target} already exists: layer ${layer} is served lazily by layerd`)
  }

  async #create (key: string, parent: string, kind: 'active' | 'view', labels: Record<string, string>): Promise<SnapshotMount[]> {
    let r: SnapshotRecord
    try {
      r = this.#records.insert({ key, parent, kind, labels }, id => {
        const dir = this.dirOf(id)
        mkdirSync(join(dir, 'fs'), { recursive: true, mode: 0o755 })
        if (kind === 'active') mkdirSync(join(dir, 'work'), { mode: 0o700 })
      })
    } catch (err) {
      if (this.#records.get(key) !== undefined) throw new AlreadyExistsError(`snapshot ${key} already exists`, { cause: err })
      throw err
    }
    try {
      return await this.#mountsOf(r)
    } catch (err) {
      await this.remove(key).catch(() => {})
      throw err
    }
  }

  async #mountsOf (r: SnapshotRecord): Promise<SnapshotMount[]> {
    const fs = join(this.dirOf(r.id), 'fs')
    const lowers = await this.#lowers(r.parent)
    const remoteBelow = lowers.remote
    if (r.kind === 'active') {
      if (lowers.dirs.length === 0) return [{ type: 'bind', source: fs, target: '', options: ['rw', 'rbind'] }]
      const options = ['index=off', ...(remoteBelow ? ['xino=off'] : []), `workdir=${join(this.dirOf(r.id), 'work')}`, `upperdir=${fs}`, `lowerdir=${lowers.dirs.join(':')}`]
      return [{ type: 'overlay', source: 'overlay', target: '', options }]
    }
    if (lowers.dirs.length === 0) return [{ type: 'bind', source: fs, target: '', options: ['ro', 'rbind'] }]
    if (lowers.dirs.length === 1) return [{ type: 'bind', source: lowers.dirs[0]!, target: '', options: ['ro', 'rbind'] }]
    return [{ type: 'overlay', source: 'overlay', target: '', options: [...(remoteBelow ? ['xino=off'] : []), `lowerdir=${lowers.dirs.join(':')}`] }]
  }

  /** The lower directories of a snapshot over `parent`, nearest first: ordinary parents' `fs`, down to a remote one's mounts (which show its whole chain). */
  async #lowers (parent: string): Promise<{ dirs: string[], remote: boolean }> {
    const dirs: string[] = []
    for (let key = parent; key !== '';) {
      const p = this.#get(key)
      if (p.remote !== undefined) {
        dirs.push(...await this.#ensureMounted(p))
        return { dirs, remote: true }
      }
      dirs.push(join(this.dirOf(p.id), 'fs'))
      key = p.parent
    }
    return { dirs, remote: false }
  }

  /** The FUSE mounts of remote snapshot `r` (lower dirs, nearest first), mounted on first use (concurrent callers share one mount). Async. */
  async #ensureMounted (r: SnapshotRecord): Promise<string[]> {
    const mountpoint = join(this.dirOf(r.id), 'fs')
    const mounted = this.#remote.lowerDirs(mountpoint)
    if (mounted !== undefined) return mounted
    let pending = this.#mounting.get(mountpoint)
    if (pending === undefined) {
      pending = (async () => {
        await this.#remote.unmount(mountpoint) // a dead mount left by an earlier daemon
        return await this.#remote.mount(r.remote!, mountpoint)
      })().finally(() => this.#mounting.delete(mountpoint))
      this.#mounting.set(mountpoint, pending)
    }
    return await pending
  }
}

function infoOf (r: SnapshotRecord): SnapshotInfo {
  return { name: r.key, parent: r.parent, kind: r.kind, labels: r.labels, createdAt: r.createdAt, updatedAt: r.updatedAt }
}

/** Bytes (st_blocks × 512) and inodes below `dir`, each inode counted once, links not followed. Async. */
async function diskUsage (dir: string): Promise<SnapshotUsage> {
  const seen = new Set<string>()
  let size = 0
  const walk = async (path: string): Promise<void> => {
    const st = await lstat(path, { bigint: true })
    const id = `${st.dev}:${st.ino}`
    if (!seen.has(id)) {
      seen.add(id)
      size += Number(st.blocks) * 512
    }
    if (st.isDirectory()) {
      for (const name of await readdir(path)) await walk(join(path, name))
    }
  }
  await walk(dir)
  return { size, inodes: seen.size }
}
