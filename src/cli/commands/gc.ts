/** `layerctl gc store|node|sandboxes` and `layerctl df`: freeing and accounting for space. */
import { UsageError } from '../../errors.js'
import type { Command, CommandContext } from '../command.js'
import { formatBytes, parseDuration } from '../human-units.js'
import { collectSandboxes } from './sandboxes.js'
import { daemonFor, storeParams } from '../daemon-client.js'

const GC_USAGE = 'layerctl gc store [--dry-run] [--grace DURATION] [--keep-history N] [--repack-threshold F] [--json] | gc node [--dry-run] [--json] | gc sandboxes (alias: gc --sandboxes)'

export const gcCommand: Command = {
  name: 'gc',
  summary: 'free space: store objects no ref needs (store), stale node state (node), sandboxes whose caller is gone (sandboxes)',
  usage: GC_USAGE,
  options: {
    sandboxes: { type: 'boolean' },
    'dry-run': { type: 'boolean' },
    grace: { type: 'string' },
    'keep-history': { type: 'string' },
    'repack-threshold': { type: 'string' }
  },
  async run (ctx, { values, positionals }) {
    const subject = positionals[0] ?? (values.sandboxes === true ? 'sandboxes' : undefined)
    if (positionals.length > 1 || (values.sandboxes === true && subject !== 'sandboxes')) throw new UsageError(`gc takes one subject; usage: ${GC_USAGE}`)
    if (subject !== 'store' && (values.grace !== undefined || values['keep-history'] !== undefined || values['repack-threshold'] !== undefined)) {
      throw new UsageError(`--grace, --keep-history and --repack-threshold apply to \`gc store\` only; usage: ${GC_USAGE}`)
    }
    if (subject !== 'store' && subject !== 'node' && values['dry-run'] !== undefined) throw new UsageError(`--dry-run applies to \`gc store\` and \`gc node\` only; usage: ${GC_USAGE}`)
    switch (subject) {
      case 'store': return await gcStoreCommand(ctx, values)
      case 'node': return await gcNodeCommand(ctx, values['dry-run'] === true)
      case 'sandboxes': {
        const { removed, failed } = await collectSandboxes(ctx)
        ctx.out(ctx.json ? JSON.stringify({ removed }) : `removed ${removed.length} orphaned sandbox(es)`)
        return failed > 0 ? 1 : 0
      }
      default: throw new UsageError(`gc needs what to collect: store, node or sandboxes${subject === undefined ? '' : ` (not ${JSON.stringify(subject)})`}; usage: ${GC_USAGE}`)
    }
  }
}

async function gcStoreCommand (ctx: CommandContext, values: Record<string, unknown>): Promise<number> {
  const grace = values.grace === undefined ? undefined : parseDuration(values.grace as string)
  if (grace === undefined && values.grace !== undefined) throw new UsageError(`invalid --grace ${JSON.stringify(values.grace)}: use a duration such as 0, 90s, 15m, 1h or 2d`)
  const keep = values['keep-history'] === undefined ? undefined : Number(values['keep-history'])
  if (keep !== undefined && !(Number.isSafeInteger(keep) && keep >= 1)) throw new UsageError(`invalid --keep-history ${JSON.stringify(values['keep-history'])}: use a whole number of versions, 1 or more`)
  const threshold = values['repack-threshold'] === undefined ? undefined : Number(values['repack-threshold'])
  if (threshold !== undefined && !(threshold >= 0 && threshold <= 1)) throw new UsageError(`invalid --repack-threshold ${JSON.stringify(values['repack-threshold'])}: use a fraction between 0 and 1`)
  const { gcStore } = await import('../../gc/store-gc.js')
  const r = await gcStore(ctx.store(), {
    dryRun: values['dry-run'] === true,
    ...(grace === undefined ? {} : { graceMs: grace }),
    ...(keep === undefined ? {} : { keepHistory: keep }),
    ...(threshold === undefined ? {} : { repackThreshold: threshold }),
    log: line => { if (ctx.debug) ctx.err(line) }
  })
  if (ctx.json) { ctx.out(JSON.stringify(r)); return 0 }
  const verb = r.dryRun ? 'would delete' : 'deleted'
  ctx.out(`${verb} ${r.deletedObjects} objects (${formatBytes(r.deletedBytes)}); kept ${r.keptObjects} (${formatBytes(r.keptBytes)}) in ${r.seconds.toFixed(2)} s`)
  for (const [kind, k] of Object.entries(r.deletedByKind)) ctx.out(`  ${kind.padEnd(10)} ${String(k.objects).padStart(7)}  ${formatBytes(k.bytes)}`)
  if (r.waitedLeases > 0 || r.rescuedObjects > 0) ctx.out(`waited for ${r.waitedLeases} writer(s); ${r.rescuedObjects} condemned object(s) were needed again and kept`)
  ctx.out(`dead chunk bytes inside kept blobs: ${formatBytes(r.deadBytesInLiveBlobs)} (${r.blobsOverRepackThreshold} blob(s) over the repack threshold; compaction is not done, see the README's format section)`)
  if (r.missing.length > 0) ctx.err(`layerctl gc: warning: ${r.missing.length} object(s) named by a root are missing from the store, e.g. ${r.missing[0]!}`)
  return 0
}

/**
 * Dead sandboxes here (their caller is gone: src/runtime), then the daemon's
 * half (src/daemon/mounts/node-gc.ts): stale traces, mount directories, cached
 * metadata of images no longer mounted. A dry run removes no sandbox and
 * reports what the daemon would free.
 */
async function gcNodeCommand (ctx: CommandContext, dryRun: boolean): Promise<number> {
  const sandboxes = dryRun ? { removed: [], failed: 0 } : await collectSandboxes(ctx)
  const r = await (await daemonFor(ctx)).call('gcNode', { dryRun, ...storeParams(ctx) })
  if (ctx.json) {
    ctx.out(JSON.stringify({ ...r, sandboxes: { removed: sandboxes.removed, failed: sandboxes.failed } }))
  } else {
    const verb = dryRun ? 'would remove' : 'removed'
    ctx.out(`${verb} ${sandboxes.removed.length} dead sandbox(es)${dryRun ? ' (not checked in a dry run)' : ''}, ${r.traces.removed.length} access trace(s) of manifests gone from the store (${r.traces.kept} kept), ` +
      `${r.mountDirs.removed.length} stale mount director${r.mountDirs.removed.length === 1 ? 'y' : 'ies'}, ${r.metadata.objects} cached TOC/manifest object(s) no mount uses (${formatBytes(r.metadata.bytes)})`)
  }
  return sandboxes.failed > 0 ? 1 : 0
}

export const dfCommand: Command = {
  name: 'df',
  summary: 'disk use: store bytes by kind, live and reclaimable, dedup; the node\'s cache, sandboxes and mounts',
  usage: 'layerctl df [--json]',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length > 0) throw new UsageError(`df takes no arguments; usage: ${this.usage}`)
    const { storeUsage } = await import('../../gc/store-df.js')
    const store = await storeUsage(ctx.store())
    const node = await nodeUsage(ctx)
    if (ctx.json) { ctx.out(JSON.stringify({ store, node })); return 0 }
    ctx.out(`store ${store.store}: ${formatBytes(store.total.bytes)} in ${store.total.objects} objects; live ${formatBytes(store.live.bytes)}, reclaimable ${formatBytes(store.reclaimable.bytes)}`)
    ctx.out(`  ${'KIND'.padEnd(10)} ${'OBJECTS'.padStart(8)} ${'BYTES'.padStart(10)} ${'LIVE'.padStart(10)} ${'RECLAIMABLE'.padStart(12)}`)
    for (const [kind, k] of Object.entries(store.byKind)) {
      if (k.objects === 0) continue
      ctx.out(`  ${kind.padEnd(10)} ${String(k.objects).padStart(8)} ${formatBytes(k.bytes).padStart(10)} ${formatBytes(k.liveBytes).padStart(10)} ${formatBytes(k.reclaimableBytes).padStart(12)}`)
    }
    const d = store.dedup
    ctx.out(`  dedup: live images hold ${formatBytes(d.referencedPlainBytes)} of files in ${formatBytes(d.distinctPlainBytes)} of distinct chunks (${d.dedupRatio.toFixed(2)}x), stored as ${formatBytes(d.storedBlobBytes)} (${d.savingRatio.toFixed(2)}x)`)
    ctx.out(`  dead chunk bytes inside live blobs: ${formatBytes(store.deadBytesInLiveBlobs)} (${store.blobsOverHalfDead} blob(s) over half dead)`)
    if (node === undefined) { ctx.out('node: layerd is not running (no cache, mount or sandbox figures)'); return 0 }
    const cap = node.cache.capBytes === null ? 'no cap' : `of ${formatBytes(node.cache.capBytes)} (reclaim from ${formatBytes(node.cache.highWatermarkBytes!)} down to ${formatBytes(node.cache.lowWatermarkBytes!)})`
    ctx.out(`node ${ctx.settings.home}: chunk cache ${formatBytes(node.cache.bytes)} ${cap}, ` +
      `${node.mounts} mount(s), ${node.sandboxes.count} sandbox(es) using ${formatBytes(node.sandboxes.diskBytes)}`)
    return 0
  }
}

export interface NodeUsage {
  cache: { bytes: number, capBytes: number | null, highWatermarkBytes: number | null, lowWatermarkBytes: number | null, chunks: number, metaBytes: number }
  mounts: number
  sandboxes: { count: number, diskBytes: number }
}

/** The node's figures: the running daemon's cache and mounts (df does not start one), and the sandboxes' disk. */
async function nodeUsage (ctx: CommandContext): Promise<NodeUsage | undefined> {
  const [{ connectDaemon }, { DEFAULT_HIGH_WATERMARK, DEFAULT_LOW_WATERMARK }, { SandboxRegistry }, { diskUsage }] = await Promise.all([
    import('../../daemon/client/daemon-launcher.js'), import('../../cache/cache-quota.js'), import('../../runtime/sandbox-registry.js'), import('../disk-usage.js')
  ])
  let client
  try { client = await connectDaemon({ home: ctx.settings.home, autoStart: false }) } catch { return undefined }
  let stats
  try {
    stats = await client.call('stats', {})
  } finally {
    client.close()
  }
  if (!('mounts' in stats) || typeof stats.mounts !== 'number') return undefined
  const sandboxes = new SandboxRegistry(ctx.db()).list()
  let diskBytes = 0
  for (const r of sandboxes) diskBytes += await diskUsage(r.stateDir)
  const cap = stats.cache.capBytes
  return {
    cache: {
      bytes: stats.cache.bytes,
      capBytes: cap,
      highWatermarkBytes: cap === null ? null : Math.floor(cap * DEFAULT_HIGH_WATERMARK),
      lowWatermarkBytes: cap === null ? null : Math.floor(cap * DEFAULT_LOW_WATERMARK),
      chunks: stats.cache.chunks,
      metaBytes: stats.cache.metaBytes
    },
    mounts: stats.mounts,
    sandboxes: { count: sandboxes.length, diskBytes }
  }
}
