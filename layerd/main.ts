#!/usr/bin/env -S node --max-semi-space-size=1
/**
 * layerd: the node daemon. A thin composition root: flags, then the daemon
 * object graph (src/daemon/layerd-daemon.ts, with the sandbox sweep of
 * src/runtime/, containerd's snapshotter of src/snapshotter/ and the run
 * socket of src/cli/run-server.ts plugged in),
 * then serve until SIGTERM.
 *
 *   layerd [--home DIR] [--cache-size SIZE] [--memory-target SIZE|off] [--store-deadline DURATION] [--no-restore] [--foreground]
 *          [--metrics-addr HOST:PORT] [--log-format text|json] [--log-level debug|info|warn|error]
 *
 * --metrics-addr (env LAYERD_METRICS_ADDR) serves Prometheus metrics on
 * GET /metrics (src/metrics/); off unless set. LAYERD_LOG_FORMAT and
 * LAYERD_LOG_LEVEL are the defaults of the two log flags.
 * --memory-target (env LAYERD_MEMORY_TARGET): proactive reclaim above that
 * memory use where layerd is charged (src/daemon/memory/memory-reclaimer.ts); on by
 * default at half the limit; `off` turns it off.
 * --store-deadline (env LAYERD_STORE_DEADLINE, default 60s): how long a FUSE
 * read waits for an unavailable store, retrying, before it gets EIO.
 *
 * Without --foreground it starts itself in the background and returns once
 * the control socket answers. Exit codes: see LAYERD_EXIT (src/exit-codes.ts).
 */
import { parseArgs } from 'node:util'
import { describeError } from '../src/errors.js'
import { parseDuration, parseSize } from '../src/cli/human-units.js'
import { resolveSettings } from '../src/state/settings.js'
import { AlreadyRunningError, LayerdDaemon } from '../src/daemon/layerd-daemon.js'
import { LAYERD_EXIT } from '../src/exit-codes.js'
import { installProcessGuards } from '../src/daemon/control/process-guards.js'
import { parseMetricsAddr } from '../src/metrics/metrics-addr.js'
import { createLogger, parseLogFormat, parseLogLevel, type Logger } from '../src/metrics/logger.js'
import { nativeMemory } from '../src/native.js'
import { HOLDER_SERVE_NICE_ENV, HOLDER_STANDBY_ENV } from '../src/holder/fd-store-protocol.js'
import { SandboxRegistry } from '../src/runtime/sandbox-registry.js'
import type { FuseBackend } from '../src/fs/fuse-binding.js'
import { cachedScriptRun } from '../src/start/cached-script.cjs'
import type { DaemonCode } from '../src/daemon/client/control-protocol.js'

// The rest (the mounts, containerd's snapshotter, the run socket) is imported where it is
// first used, after the control socket listens: what is loaded before it is what makes a start slow (src/daemon/README.md).
const snapshotter = async (): Promise<typeof import('../src/snapshotter/containerd-snapshotter.js')> => await import('../src/snapshotter/containerd-snapshotter.js')

/** glibc makes up to 8 malloc arenas per core, one per thread that allocates; the daemon's few threads share 2 (fewer pages held free). */
const MALLOC_ARENAS = 2
/** Allocations this big (range GETs' buffers, up to 8 MiB) get their own mmap, given back at free(), not kept in an arena until a trim. */
const MALLOC_MMAP_THRESHOLD_BYTES = 1024 * 1024

const DEFAULT_CACHE_SIZE = '10G'

async function main (): Promise<number> {
  let values
  try {
    ({ values } = parseArgs({
      options: {
        home: { type: 'string' },
        'cache-size': { type: 'string' },
        'memory-target': { type: 'string' },
        'store-deadline': { type: 'string' },
        'no-restore': { type: 'boolean' },
        foreground: { type: 'boolean' },
        'metrics-addr': { type: 'string' },
        'log-format': { type: 'string' },
        'log-level': { type: 'string' },
        help: { type: 'boolean', short: 'h' }
      }
    }))
  } catch (err) {
    console.error(`layerd: ${describeError(err)}; usage: layerd [--home DIR] [--cache-size SIZE] [--memory-target SIZE|off] [--store-deadline DURATION] [--no-restore] [--foreground] [--metrics-addr HOST:PORT] [--log-format text|json] [--log-level debug|info|warn|error]`)
    return LAYERD_EXIT.USAGE
  }
  if (values.help === true) {
    console.log('usage: layerd [--home DIR] [--cache-size SIZE] [--memory-target SIZE|off] [--store-deadline DURATION] [--no-restore] [--foreground] [--metrics-addr HOST:PORT] [--log-format text|json] [--log-level debug|info|warn|error]')
    return LAYERD_EXIT.OK
  }
  const settings = resolveSettings({ ...(values.home === undefined ? {} : { home: values.home }) })
  const { home } = settings
  const cacheSizeFlag = values['cache-size'] ?? settings.cacheSize ?? DEFAULT_CACHE_SIZE
  const cacheBytes = cacheSizeFlag === 'unlimited' ? Infinity : parseSize(cacheSizeFlag)
  if (cacheBytes === undefined) {
    console.error(`layerd: invalid --cache-size ${JSON.stringify(cacheSizeFlag)}: use a size such as 20G, or unlimited`)
    return LAYERD_EXIT.USAGE
  }
  const memoryTargetFlag = values['memory-target'] ?? settings.memoryTarget
  const memoryTarget = memoryTargetFlag === undefined ? 'default' : memoryTargetFlag === 'off' ? null : parseSize(memoryTargetFlag)
  if (memoryTarget === undefined) {
    console.error(`layerd: invalid --memory-target ${JSON.stringify(memoryTargetFlag)} (or LAYERD_MEMORY_TARGET): use a size such as 2G, or off`)
    return LAYERD_EXIT.USAGE
  }
  const storeDeadlineFlag = values['store-deadline'] ?? settings.storeDeadline
  const storeDeadlineMs = storeDeadlineFlag === undefined ? null : parseDuration(storeDeadlineFlag)
  if (storeDeadlineMs === undefined || (storeDeadlineMs !== null && storeDeadlineMs < 1000)) {
    console.error(`layerd: invalid --store-deadline ${JSON.stringify(storeDeadlineFlag)} (or LAYERD_STORE_DEADLINE): use a duration of at least 1s, such as 60s or 5m`)
    return LAYERD_EXIT.USAGE
  }
  const metricsAddr = values['metrics-addr'] ?? (process.env.LAYERD_METRICS_ADDR === '' ? undefined : process.env.LAYERD_METRICS_ADDR)
  let log: Logger
  try {
    if (metricsAddr !== undefined) parseMetricsAddr(metricsAddr)
    log = createLogger(parseLogFormat(values['log-format'] ?? process.env.LAYERD_LOG_FORMAT ?? 'text'), parseLogLevel(values['log-level'] ?? process.env.LAYERD_LOG_LEVEL ?? 'info'))
  } catch (err) {
    console.error(`layerd: ${describeError(err)}`)
    return LAYERD_EXIT.USAGE
  }
  if (values.foreground !== true) {
    const args = ['--cache-size', cacheSizeFlag, ...(memoryTargetFlag === undefined ? [] : ['--memory-target', memoryTargetFlag]),
      ...(storeDeadlineFlag === undefined ? [] : ['--store-deadline', storeDeadlineFlag]), ...(values['no-restore'] === true ? ['--no-restore'] : []),
      ...(metricsAddr === undefined ? [] : ['--metrics-addr', metricsAddr]),
      ...(values['log-format'] === undefined ? [] : ['--log-format', values['log-format']]),
      ...(values['log-level'] === undefined ? [] : ['--log-level', values['log-level']])]
    const { connectDaemon } = await import('../src/daemon/client/daemon-launcher.js')
    const client = await connectDaemon({ home, args, holder: settings.holder })
    const info = await client.call('ping')
    client.close()
    console.log(`layerd running (pid ${info.pid}) for ${home}`)
    return LAYERD_EXIT.OK
  }
  let fuseBackend: FuseBackend | undefined
  try {
    fuseBackend = settings.fuseBackend === undefined ? undefined : (await import('../src/fs/image-mount.js')).parseFuseBackend(settings.fuseBackend)
  } catch (err) {
    console.error(`layerd: ${describeError(err)}`)
    return LAYERD_EXIT.USAGE
  }
  const warmStandby = process.env[HOLDER_STANDBY_ENV] === '1'
  const serveNice = process.env[HOLDER_SERVE_NICE_ENV] === undefined ? undefined : Number(process.env[HOLDER_SERVE_NICE_ENV])
  delete process.env[HOLDER_STANDBY_ENV] // not for the sandboxes and tools this daemon starts
  delete process.env[HOLDER_SERVE_NICE_ENV]
  const snapshotterStore = { store: settings.store, ...(settings.s3Endpoint === undefined ? {} : { s3Endpoint: settings.s3Endpoint }) }
  try {
    nativeMemory().mallocArenaMax(MALLOC_ARENAS)
    nativeMemory().mallocMmapThreshold(MALLOC_MMAP_THRESHOLD_BYTES)
  } catch (err) { log(`memory: cannot cap malloc arenas: ${(err as Error).message}`, 'warn') }
  installProcessGuards(log, LAYERD_EXIT.FATAL)
  const script = cachedScriptRun()
  const code: DaemonCode = script === undefined ? { bundle: false } : { bundle: true, codeCache: script.codeCache }
  log(script === undefined ? 'code: the unbundled modules (dist/layerd/main.js)' : `code: ${script.file}, code cache ${script.codeCache}, compiled in ${Math.round(script.compileMs)} ms`)
  const daemon = new LayerdDaemon({
    home,
    cacheBytes,
    restoreMounts: values['no-restore'] !== true,
    memoryTarget,
    ...(storeDeadlineMs === null ? {} : { storeDeadlineMs }),
    warmStandby,
    ...(serveNice === undefined || !Number.isInteger(serveNice) ? {} : { serveNice }),
    mounts: { stacks: settings.stacks, topLayerPrefetch: settings.topLayerPrefetch, ...(fuseBackend === undefined ? {} : { fuseBackend }) },
    log,
    code,
    ...(metricsAddr === undefined ? {} : { metricsAddr }),
    sandboxStates: db => new SandboxRegistry(db).list().map(r => ({ tier: r.tier, state: SandboxRegistry.status(r) })),
    // `layerctl run` for the C front (native/layerctl.c), done by a runner process this daemon starts on first use (src/cli/run-server.ts).
    services: [async parts => await (await snapshotter()).containerdSnapshotterService(parts, snapshotterStore), async parts => await (await import('../src/cli/run-server.js')).startRunServer(parts)],
    preload: [async () => { await (await snapshotter()).preloadContainerdSnapshotter() }],
    sweepAtStart: async (db, log) => {
      // The sandbox runtimes' code is loaded only when there is something to clean.
      if (!new SandboxRegistry(db).list().some(r => SandboxRegistry.status(r) === 'orphaned')) return
      const { removeOrphanedSandboxes } = await import('../src/runtime/sandbox-cleanup.js')
      const { removed } = await removeOrphanedSandboxes(db, log)
      if (removed.length > 0) log(`removed ${removed.length} sandbox(es) left by crashed callers`)
    }
  })
  try {
    await daemon.start()
  } catch (err) {
    log(`cannot start: ${describeError(err)}`, 'warn')
    return err instanceof AlreadyRunningError ? LAYERD_EXIT.ALREADY_RUNNING : LAYERD_EXIT.CANNOT_OPEN_HOME
  }
  // The node's own store: its client's one-time set-up is paid now, while the daemon is idle, not by the first mount.
  daemon.warmStore(snapshotterStore)
  const how = await new Promise<'stop' | 'handover'>(resolve => {
    const stop = (signal: string): void => { log(`${signal}: unmounting and stopping`); resolve('stop') }
    process.once('SIGTERM', () => stop('SIGTERM'))
    process.once('SIGINT', () => stop('SIGINT'))
    // A planned restart by the holder: leave the mounts to the next daemon (src/holder/README.md).
    process.once('SIGUSR2', () => { log('SIGUSR2: handing every FUSE connection over to the next layerd'); resolve('handover') })
  })
  if (how === 'handover' && daemon.keptBy !== null) {
    await daemon.handover()
    return LAYERD_EXIT.HANDOVER
  }
  try {
    await daemon.stop()
  } catch (err) {
    log(`stop failed: ${(err as Error)?.stack ?? String(err)}`, 'warn')
    return LAYERD_EXIT.FAILURE
  }
  return LAYERD_EXIT.OK
}

// Exit explicitly: a stopped daemon must not linger on a stray handle. No top-level await: the start path runs
// this module bundled as CommonJS (build/layerd-bundle.ts), which has none.
main().then(code => process.exit(code), (err: unknown) => {
  console.error(`layerd: fatal: ${(err as Error)?.stack ?? String(err)}`)
  process.exit(LAYERD_EXIT.FATAL)
})
