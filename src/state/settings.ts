/**
 * The node's settings, from flags and environment, resolved once at a
 * composition root (layerd/main.ts, src/cli/main.ts, the library API's
 * createSandbox) and passed down: nothing below reads `process.env` for
 * them.
 *
 * | setting | flag | environment |
 * |---|---|---|
 * | home (node-local state) | `--home DIR` | LAYERD_HOME |
 * | store (default: the embedded file store under home) | `--store URL` | LAYERD_STORE |
 * | S3 endpoint | `--s3-endpoint URL` | LAYERD_S3_ENDPOINT |
 * | cache cap of a daemon started on demand | `layerd --cache-size` | LAYERD_CACHE_SIZE |
 * | memory use above which layerd reclaims (default: half the limit; off) | `layerd --memory-target SIZE` | LAYERD_MEMORY_TARGET |
 * | how long a read waits for an unavailable store before EIO (default 60s) | `layerd --store-deadline DURATION` | LAYERD_STORE_DEADLINE |
 * | image stacks (0: one merged mount per image, and per containerd layer chain) | | LAYERD_STACKS |
 * | a containerd chain's small top layer fetched whole at mount (0: on demand only) | | LAYERD_TOP_PREFETCH |
 * | FUSE backend (kernel, fuse-native) | | LAYERD_FUSE_BACKEND |
 * | guest kernel, its modules, where to look for one | | LAYERD_VM_KERNEL, LAYERD_VM_MODULES, LAYERD_VM_KERNEL_DIR |
 * | VM accelerator (auto, kvm, tcg) | | LAYERD_VM_ACCEL |
 *
 * May import: nothing from the project.
 */
import { homedir } from 'node:os'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

/** Where the VM tiers find their kernel and how they run it. Values are checked where they are used. */
export interface VmSettings {
  /** A guest kernel (vmlinuz), and its `lib/modules/<release>` directory. */
  kernel?: string
  modules?: string
  /** A directory searched first for unpacked `linux-image-*` packages. */
  kernelDir?: string
  /** 'auto', 'kvm' or 'tcg'. */
  accel?: string
}

export interface Settings {
  home: string
  store: string
  s3Endpoint?: string
  /** The cache cap (e.g. 20G, unlimited) a daemon is started with; undefined: layerd's default. */
  cacheSize?: string
  /** Proactive reclaim's target (a size such as 2G, or 'off'); undefined: layerd's default. Checked by layerd/main.ts. */
  memoryTarget?: string
  /** How long a read waits for an unavailable store (a duration such as 60s); undefined: layerd's default. Checked by layerd/main.ts. */
  storeDeadline?: string
  /** Images for sandboxes as stacks (a shared base mount, the top layer, an overlay). Default true. */
  stacks: boolean
  /** A stacked containerd layer chain's small top layer is fetched whole at mount. Default true. */
  topLayerPrefetch: boolean
  /** 'kernel' or 'fuse-native'; undefined: the kernel backend when it can serve. */
  fuseBackend?: string
  /** Under a holder, keep a warm standby layerd loaded while one serves (LAYERD_WARM_STANDBY=0: none). Default true. */
  warmStandby: boolean
  /** A layerd that a client starts runs under a holder (src/holder/), which keeps its FUSE connections across its restarts (LAYERD_HOLDER=0: no holder). Default true. */
  holder: boolean
  vm: VmSettings
}

export interface SettingFlags { home?: string, store?: string, 's3-endpoint'?: string }

/** Default home: /var/lib/layerd for root (the daemon's user), ~/.layerd otherwise. */
export function defaultHome (): string {
  return process.getuid?.() === 0 ? '/var/lib/layerd' : join(homedir(), '.layerd')
}

/** The settings from `flags`, then `env`, then defaults. Sync; never throws. */
export function resolveSettings (flags: SettingFlags, env: NodeJS.ProcessEnv = process.env): Settings {
  const given = (name: string): string | undefined => env[name] === undefined || env[name] === '' ? undefined : env[name]
  const home = resolve(flags.home ?? env.LAYERD_HOME ?? defaultHome())
  const store = flags.store ?? env.LAYERD_STORE ?? pathToFileURL(join(home, 'store')).href
  const s3Endpoint = flags['s3-endpoint'] ?? env.LAYERD_S3_ENDPOINT
  const vm: VmSettings = {}
  for (const [key, name] of [['kernel', 'LAYERD_VM_KERNEL'], ['modules', 'LAYERD_VM_MODULES'], ['kernelDir', 'LAYERD_VM_KERNEL_DIR'], ['accel', 'LAYERD_VM_ACCEL']] as const) {
    const v = given(name)
    if (v !== undefined) vm[key] = v
  }
  const cacheSize = given('LAYERD_CACHE_SIZE')
  const fuseBackend = given('LAYERD_FUSE_BACKEND')
  const memoryTarget = given('LAYERD_MEMORY_TARGET')
  const storeDeadline = given('LAYERD_STORE_DEADLINE')
  return {
    home,
    store,
    ...(s3Endpoint === undefined || s3Endpoint === '' ? {} : { s3Endpoint }),
    ...(cacheSize === undefined ? {} : { cacheSize }),
    ...(memoryTarget === undefined ? {} : { memoryTarget }),
    ...(storeDeadline === undefined ? {} : { storeDeadline }),
    stacks: env.LAYERD_STACKS !== '0',
    topLayerPrefetch: env.LAYERD_TOP_PREFETCH !== '0',
    warmStandby: env.LAYERD_WARM_STANDBY !== '0',
    holder: env.LAYERD_HOLDER !== '0',
    ...(fuseBackend === undefined ? {} : { fuseBackend }),
    vm
  }
}
