/**
 * The library API: `createSandbox({ image, tier, limits })` → a Sandbox with
 * exec, stop and destroy, on any tier, from any image in the store.
 *
 * The node's layerd mounts the image once (shared, read-only, lazily
 * fetched); the tier driver gives the sandbox its own writable layer and
 * isolation. Every sandbox is recorded in the node database before it is
 * created, so one whose owner crashes is found and cleaned later.
 *
 * May import: everything below it (daemon client, runtime, state).
 */
import { randomBytes } from 'node:crypto'
import { chmod, mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { DaemonUnavailableError, UnsupportedError } from '../errors.js'
import type { OciImageConfig } from '../format/manifest.js'
import { connectDaemon } from '../daemon/client/daemon-launcher.js'
import { overlayPaths } from '../runtime/overlay/sandbox-overlay.js'
import { cleanupSandbox } from '../runtime/sandbox-cleanup.js'
import { SandboxRegistry, type SandboxRecord } from '../runtime/sandbox-registry.js'
import { DEFAULT_LIMITS, type Sandbox, type SandboxLimits, type Tier, type TierDriver } from '../runtime/sandbox.js'
import { resolveSettings } from '../state/settings.js'
import { denialRecorder } from './denial-recorder.js'
import { leaseNodeDb } from './shared-node-db.js'
import { driverFor, type DriverOptions } from './tier-drivers.js'

export interface CreateSandboxOptions extends DriverOptions {
  /** NAME:TAG or a manifest digest. */
  image: string
  tier: Tier
  limits?: Partial<SandboxLimits>
  /** Node and store; default from LAYERD_HOME / LAYERD_STORE / LAYERD_S3_ENDPOINT (and `vm` from LAYERD_VM_*: src/state/settings.ts). */
  home?: string
  store?: string
  s3Endpoint?: string
  /** Keep the sandbox (for commit, ps) after this process ends. */
  keep?: boolean
  /** Start the node's layerd when it is not running (default true; false inside layerd itself, whose socket may be closing). */
  startDaemon?: boolean
}

export interface ManagedSandbox extends Sandbox {
  readonly image: string
  readonly manifest: string
  readonly config: OciImageConfig
  readonly stateDir: string
  /** The writable layer's directory (process and container tiers), for commit. */
  readonly upperDir?: string
  /** Milliseconds spent making the image available: mounting it, or building its block view (0 when ready). */
  readonly imageMs: number
}

const readyDrivers = new WeakSet<TierDriver>()

/** Why the driver cannot run here, or undefined; a host found ready is not probed again by this process. */
async function hostReadiness (driver: TierDriver): Promise<string | undefined> {
  if (readyDrivers.has(driver)) return undefined
  const why = await driver.unavailableReason()
  if (why === undefined) readyDrivers.add(driver)
  return why
}

/** Create a sandbox. Async. Throws NotFoundError for an unknown image, UnsupportedError for a tier this host cannot run. */
export async function createSandbox (opts: CreateSandboxOptions): Promise<ManagedSandbox> {
  const settings = resolveSettings({
    ...(opts.home === undefined ? {} : { home: opts.home }),
    ...(opts.store === undefined ? {} : { store: opts.store }),
    ...(opts.s3Endpoint === undefined ? {} : { 's3-endpoint': opts.s3Endpoint })
  })
  const driver = driverFor(opts.tier, { ...opts, vm: opts.vm ?? settings.vm })
  const why = await hostReadiness(driver)
  if (why !== undefined) throw new UnsupportedError(`cannot create a ${opts.tier} sandbox: ${why}`)
  const started = performance.now()
  const daemon = await connectDaemon({ home: settings.home, autoStart: opts.startDaemon !== false, holder: settings.holder })
  const isVm = opts.tier === 'microvm' || opts.tier === 'vm'
  const where = { image: opts.image, store: settings.store, ...(settings.s3Endpoint === undefined ? {} : { s3Endpoint: settings.s3Endpoint }) }
  let exposure: { rootfs?: string, blockView?: string, manifest: string, config: OciImageConfig, ms: number }
  try {
    if (isVm) {
      const view = await daemon.call('blockView', where)
      exposure = { blockView: view.path, manifest: view.manifest, config: view.config, ms: view.buildMs }
    } else {
      const shared = await daemon.call('image', where)
      exposure = { rootfs: shared.mountpoint, manifest: shared.manifest, config: shared.config, ms: shared.mountMs }
    }
  } catch (err) {
    daemon.close()
    throw err
  }
  const id = `sb-${randomBytes(6).toString('hex')}`
  // Traversable (not listable): a sandbox that runs as the image's user reaches its root through these.
  await mkdir(join(settings.home, 'sandboxes'), { recursive: true, mode: 0o711 })
  await chmod(join(settings.home, 'sandboxes'), 0o711)
  const stateDir = join(settings.home, 'sandboxes', id)
  await mkdir(stateDir, { mode: 0o700 })
  const db = leaseNodeDb(settings.home)
  const registry = new SandboxRegistry(db.db)
  const record: SandboxRecord = {
    id, tier: opts.tier, image: opts.image, manifest: exposure.manifest, stateDir,
    createdAt: new Date().toISOString(), ownerPid: process.pid, keep: opts.keep === true
  }
  registry.add(record)
  const limits = { ...DEFAULT_LIMITS, ...opts.limits }
  let inner: Sandbox
  try {
    inner = await driver.create({
      id, imageName: opts.image, config: exposure.config, stateDir, limits, denials: denialRecorder(db.db),
      ...(exposure.rootfs === undefined ? {} : { rootfs: exposure.rootfs }),
      ...(exposure.blockView === undefined ? {} : { blockView: exposure.blockView })
    })
  } catch (err) {
    daemon.close()
    await cleanupSandbox(record).catch(() => {})
    registry.remove(id)
    db.release()
    throw err
  }
  // The daemon's layerd_sandbox_create_duration_seconds: only this process can time the creation. A lost report loses nothing else.
  await daemon.call('sandboxCreated', { tier: opts.tier, seconds: (performance.now() - started) / 1000 }).catch(() => {})
  daemon.close()
  const linux = opts.tier === 'process' || opts.tier === 'container'
  let destroyed: Promise<void> | undefined
  return {
    id,
    tier: opts.tier,
    image: opts.image,
    manifest: exposure.manifest,
    config: exposure.config,
    stateDir,
    imageMs: exposure.ms,
    ...(linux ? { upperDir: overlayPaths(stateDir).upperDir } : {}),
    exec: async o => {
      try { return await inner.exec(o) } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOTCONN') {
          throw new DaemonUnavailableError(`sandbox ${id}: its image mount is gone (layerd stopped or was killed); create a new sandbox`, { cause: err })
        }
        throw err
      }
    },
    stop: async () => { await inner.stop() },
    destroy: async () => {
      destroyed ??= (async () => {
        await inner.destroy()
        // The Linux tiers' destroy removes all that cleanupSandbox would (cgroup, runtime state, mounts, files): not twice.
        if (!linux) await cleanupSandbox(record)
        registry.remove(id)
        db.release()
      })()
      await destroyed
    }
  }
}
