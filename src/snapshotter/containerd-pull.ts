/**
 * `layerctl containerd pull`: a layerd image into a containerd, with no
 * layer downloaded or unpacked (as stargz's `ctr-remote image rpull`;
 * containerd 1.6's own `ctr pull` sends no remote-snapshot labels).
 *
 * Under a lease (so containerd's GC keeps what is written until the image
 * references it): the config and manifest go into containerd's content
 * store with the GC labels that tie manifest → config and layers, and
 * config → the top snapshot (`containerd.io/gc.ref.snapshot.layerd`);
 * every layer is prepared through containerd's snapshots service with
 * `containerd.io/snapshot.ref` = its chain ID, so the layerd snapshotter
 * commits it remotely and answers ALREADY_EXISTS; then the image record.
 * A layer the snapshotter does not serve remotely fails the pull, naming it
 * (there is no blob to download), and leaves no snapshot of its own.
 *
 * A `docker://` image takes its manifest and config from its registry
 * (registry-image.ts) and its layers from layerd's store by blob digest.
 *
 * layerd runs it for `layerctl containerd pull` of a layerd image (the
 * `containerdPull` control method, served by containerd-snapshotter.ts), with
 * its store already open and containerd's protos already loaded; layerctl
 * runs it itself for a `docker://` image, with the caller's registry
 * credentials.
 *
 * May import: src/errors.ts, src/format/, src/image/, src/registry/, src/store/ (types), src/daemon/client/control-protocol.ts (types), this folder.
 */
import { randomBytes } from 'node:crypto'
import { BadInputError, DaemonUnavailableError, NotFoundError, NotRemoteError } from '../errors.js'
import type { ContainerdPullResult } from '../daemon/client/control-protocol.js'
import { getManifest } from '../image/metadata-objects.js'
import { resolveRef } from '../image/refs.js'
import { isDigest } from '../format/digest.js'
import { parseRef } from '../format/ref.js'
import type { ImageManifest } from '../format/manifest.js'
import type { ObjectStore } from '../store/object-store.js'
import { ContainerdClient } from './containerd-client.js'
import { SNAPSHOTTER_NAME } from './snapshotter-paths.js'
import { TARGET_SNAPSHOT_REF_LABEL } from './layerd-snapshotter.js'
import { CRI_LAYER_DIGEST_LABEL, LAYERD_LAYER_LABEL } from './layer-lookup.js'
import { ociImageOf } from './oci-image.js'
import { registryOciImage } from './registry-image.js'
import type { RegistryClientOptions } from '../registry/registry-client.js'
import { AlreadyExistsError } from './snapshot-errors.js'

const LEASE_EXPIRE_MS = 60 * 60 * 1000
/** How long a snapshots call is retried while containerd's proxy plugin reconnects to the snapshotter (snapshotsCall). */
const SNAPSHOTTER_RECONNECT_MS = 15_000
const SNAPSHOTTER_RETRY_MS = 250

export interface ContainerdPullOptions {
  /** layerd image (NAME:TAG or a manifest digest), or a registry image `docker://HOST/REPO:TAG` whose layers layerd holds. */
  image: string
  store: Pick<ObjectStore, 'get' | 'url'>
  /** For a docker:// image: TLS and credentials. */
  registry?: RegistryClientOptions
  address: string
  namespace: string
  /** containerd image name; default `image`. */
  name?: string
  snapshotter?: string
  /**
   * Called (sync, not awaited) once every layer is prepared, with the top
   * layer's chain ID: layerd's own pull has its snapshotter mount that
   * snapshot now, while the image record is written and the caller's `ctr
   * run` starts, not in that run's Prepare.
   */
  onLayersPrepared?: (topChainId: string) => void
}

export type { ContainerdPullResult }

/** containerd's rule for a namespace (its `namespaces` package): labels of letters and digits joined by `.`, `_` or `-`, at most 76 characters. */
const NAMESPACE_RE = /^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$/
const MAX_NAMESPACE_LENGTH = 76

/** Pull `opts.image` into containerd as described above. Async; LayerdErrors name the image, layer and containerd's answer. */
export async function containerdPull (opts: ContainerdPullOptions): Promise<ContainerdPullResult> {
  const started = performance.now()
  if (!NAMESPACE_RE.test(opts.namespace) || opts.namespace.length > MAX_NAMESPACE_LENGTH) {
    throw new BadInputError(`containerd pull ${opts.image}: namespace ${JSON.stringify(opts.namespace).slice(0, 90)} is not a containerd namespace (letters and digits, joined by ".", "_" or "-"; at most ${MAX_NAMESPACE_LENGTH} characters)`)
  }
  const phases: Record<string, number> = {}
  let last = started
  const phase = (name: string): void => { const now = performance.now(); phases[name] = (phases[name] ?? 0) + (now - last); last = now }
  const snapshotter = opts.snapshotter ?? SNAPSHOTTER_NAME
  const fromRegistry = opts.image.startsWith('docker://')
  const client = new ContainerdClient(opts.address, opts.namespace)
  try {
    // The image's metadata and containerd's lease (its first call loads the protos and connects) at once.
    const [oci] = await Promise.all([
      fromRegistry
        ? registryOciImage(opts.image, opts.registry ?? { env: process.env })
        : layerdManifest(opts.store, opts.image).then(m => ociImageOf(opts.image, m)),
      client.takeLease(`layerctl-pull-${randomBytes(8).toString('hex')}`, LEASE_EXPIRE_MS)
    ])
    const name = opts.name ?? ('ref' in oci ? oci.ref as string : opts.image)
    phase('manifest+lease')
    const manifestLabels: Record<string, string> = { 'containerd.io/gc.ref.content.config': oci.config.digest }
    oci.layers.forEach((l, i) => { manifestLabels[`containerd.io/gc.ref.content.l.${i}`] = l.digest })
    // The two content writes and the layers' Prepares at once: they are independent, and the lease keeps both.
    let remote = 0
    let alreadyThere = 0
    const content = Promise.all([
      client.writeContent(oci.config.digest, oci.config.bytes, { [`containerd.io/gc.ref.snapshot.${snapshotter}`]: oci.layers.at(-1)!.chainId }),
      client.writeContent(oci.manifest.digest, oci.manifest.bytes, manifestLabels)
    ]).then(() => { phases.content = performance.now() - last })
    const layers = (async () => {
      let parent = ''
      for (const [i, layer] of oci.layers.entries()) {
        const there = await snapshotExists(client, snapshotter, layer.chainId)
        if (there) {
          alreadyThere++
        } else {
          await prepareRemote(client, snapshotter, layer.chainId, parent, {
            [TARGET_SNAPSHOT_REF_LABEL]: layer.chainId,
            ...(layer.toc === undefined ? {} : { [LAYERD_LAYER_LABEL]: layer.toc }),
            [CRI_LAYER_DIGEST_LABEL]: layer.digest,
            'containerd.io/snapshot/cri.image-ref': name
          }, `layer ${i + 1} of ${oci.layers.length} (${layer.toc ?? layer.digest}) of ${opts.image}`, fromRegistry)
          remote++
        }
        parent = layer.chainId
      }
      phases.layers = performance.now() - last
      opts.onLayersPrepared?.(parent)
    })()
    // Both settle before the pull goes on or fails (no write left running against a released lease).
    const [wrote, prepared] = await Promise.allSettled([content, layers])
    if (prepared.status === 'rejected') throw prepared.reason
    if (wrote.status === 'rejected') throw wrote.reason
    phase('content+layers')
    const image = { name, labels: {}, target: { media_type: oci.manifest.mediaType, digest: oci.manifest.digest, size: oci.manifest.bytes.length } }
    try {
      await client.call('images', 'Create', { image })
    } catch (err) {
      if (!(err instanceof AlreadyExistsError)) throw err
      await client.call('images', 'Update', { image, update_mask: { paths: ['target', 'labels'] } })
    }
    phase('image')
    await client.releaseLease()
    phase('release')
    return { name, manifest: oci.manifest.digest, layers: oci.layers.length, remote, alreadyThere, ms: performance.now() - started, phases }
  } finally {
    await client.releaseLease().catch(() => {})
    client.close()
  }
}

/** The manifest of a layerd image (no TOC is read: containerd's side needs only the layers' digests). Async. */
async function layerdManifest (store: Pick<ObjectStore, 'get' | 'url'>, image: string): Promise<ImageManifest> {
  const digest = isDigest(image) ? image : await resolveRef(store, parseRef(image))
  return await getManifest(store, digest)
}

/**
 * A call to containerd's snapshots service, retried on UNAVAILABLE for up to
 * SNAPSHOTTER_RECONNECT_MS. containerd has answered by then (the lease came
 * first), so UNAVAILABLE is its proxy plugin's connection to the snapshotter:
 * containerd dials it at start with a first handshake deadline of about 1 s
 * (gRPC's backoff, its connect timeout unset), which a loaded layerd loading
 * gRPC on that first dial can miss ("timed out waiting for server
 * handshake"); while it backs off (capped at 3 s) containerd fails such calls
 * at once, unsent. Async; other errors, and UNAVAILABLE after the window, throw.
 */
async function snapshotsCall (client: ContainerdClient, method: string, request: unknown): Promise<void> {
  const deadline = Date.now() + SNAPSHOTTER_RECONNECT_MS
  for (;;) {
    try {
      await client.call('snapshots', method, request)
      return
    } catch (err) {
      if (!(err instanceof DaemonUnavailableError) || Date.now() >= deadline) throw err
      await new Promise(resolve => setTimeout(resolve, SNAPSHOTTER_RETRY_MS))
    }
  }
}

async function snapshotExists (client: ContainerdClient, snapshotter: string, key: string): Promise<boolean> {
  try {
    await snapshotsCall(client, 'Stat', { snapshotter, key })
    return true
  } catch (err) {
    if (err instanceof NotFoundError) return false
    throw err
  }
}

/** Prepare with the remote labels; success means ALREADY_EXISTS. An ordinary snapshot made instead is removed and the pull fails. */
async function prepareRemote (client: ContainerdClient, snapshotter: string, chainId: string, parent: string, labels: Record<string, string>, what: string, fromRegistry: boolean): Promise<void> {
  const key = `extract-layerctl-${randomBytes(6).toString('hex')} ${chainId}`
  try {
    await snapshotsCall(client, 'Prepare', { snapshotter, key, parent, labels })
  } catch (err) {
    if (err instanceof AlreadyExistsError) return
    throw err
  }
  await snapshotsCall(client, 'Remove', { snapshotter, key }).catch(() => {})
  throw new NotRemoteError(fromRegistry
    ? `${what}: layerd's store does not hold this layer (no layer-by-blob entry for it: \`layerctl push\` the image first), so it cannot be served lazily; \`ctr image pull --snapshotter ${snapshotter}\` pulls it the ordinary way`
    : `${what}: the ${snapshotter} snapshotter did not serve it from layerd's store (is layerd running for this store, and is containerd's proxy plugin "${snapshotter}" its snapshotter.sock?); nothing to download it from`)
}
