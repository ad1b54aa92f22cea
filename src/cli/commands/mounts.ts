/** `layerctl mount / umount / mounts / stats / prefetch / trace`: the daemon's mounts. */
import { UsageError } from '../../errors.js'
import type { Command } from '../command.js'
import { absolute, daemonFor, storeParams } from '../daemon-client.js'
import { formatBytes } from '../human-units.js'

export const mountCommand: Command = {
  name: 'mount',
  summary: 'mount an image read-only at DIR (lazy: chunks are fetched on first read)',
  usage: 'layerctl mount NAME:TAG DIR',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length !== 2) throw new UsageError(`mount takes NAME:TAG and DIR; usage: ${this.usage}`)
    const daemon = await daemonFor(ctx)
    const info = await daemon.call('mount', { image: positionals[0], mountpoint: absolute(positionals[1]!), ...storeParams(ctx) })
    ctx.out(ctx.json ? JSON.stringify(info) : `mounted ${info.image} (${info.manifest}) at ${info.mountpoint} in ${info.mountMs.toFixed(0)} ms`)
    return 0
  }
}

export const umountCommand: Command = {
  name: 'umount',
  summary: 'unmount a layerd mount',
  usage: 'layerctl umount DIR',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length !== 1) throw new UsageError(`umount takes DIR; usage: ${this.usage}`)
    await (await daemonFor(ctx)).call('umount', { mountpoint: absolute(positionals[0]!) })
    return 0
  }
}

export const mountsCommand: Command = {
  name: 'mounts',
  summary: 'list layerd mounts on this node',
  usage: 'layerctl mounts [--json]',
  options: {},
  async run (ctx) {
    const list = await (await daemonFor(ctx)).call('mounts')
    if (ctx.json) { ctx.out(JSON.stringify(list)); return 0 }
    for (const m of list) ctx.out(`${m.mountpoint}  ${m.image}  ${m.manifest.slice(0, 19)}  ${m.store}`)
    return 0
  }
}

export const statsCommand: Command = {
  name: 'stats',
  summary: 'bytes fetched, cache hits and misses for a mount (or the whole node)',
  usage: 'layerctl stats [DIR] [--json]',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length > 1) throw new UsageError(`stats takes at most one DIR; usage: ${this.usage}`)
    const params = positionals.length === 1 ? { mountpoint: absolute(positionals[0]!) } : {}
    const s = await (await daemonFor(ctx)).call('stats', params)
    if (ctx.json || !('mountpoint' in s)) { ctx.out(JSON.stringify(s, null, ctx.json ? undefined : 2)); return 0 }
    const pct = s.storedBytes === 0 ? 0 : (100 * s.fetchedBytes) / s.storedBytes
    ctx.out(`${s.mountpoint} (${s.image})`)
    ctx.out(`fetched   ${formatBytes(s.fetchedBytes)} of ${formatBytes(s.storedBytes)} stored (${pct.toFixed(1)}%), image ${formatBytes(s.imageBytes)}`)
    ctx.out(`chunks    ${s.chunkHits} hits, ${s.chunkMisses} misses, ${s.fetches} range GETs, ${s.prefetchedChunks} prefetched`)
    ctx.out(`errors    ${s.corruptChunks} corrupt chunks, ${s.ioErrors} I/O errors, ${s.storeErrors} store errors`)
    return 0
  }
}

export const prefetchCommand: Command = {
  name: 'prefetch',
  summary: 'warm the cache with a mounted image in the background, behind demand reads',
  usage: 'layerctl prefetch DIR [--wait]',
  options: { wait: { type: 'boolean' } },
  async run (ctx, { values, positionals }) {
    if (positionals.length !== 1) throw new UsageError(`prefetch takes DIR; usage: ${this.usage}`)
    const r = await (await daemonFor(ctx)).call('prefetch', { mountpoint: absolute(positionals[0]!), wait: values.wait === true })
    ctx.out(ctx.json
      ? JSON.stringify(r)
      : `prefetch${values.wait === true ? 'ed' : 'ing'} ${r.chunks} chunks (${r.traced} from this image's access trace first)${values.wait === true ? '' : ' in the background'}`)
    return 0
  }
}

export const traceCommand: Command = {
  name: 'trace',
  summary: "publish this node's access trace of an image to its store: other nodes prefetch it at mount",
  usage: 'layerctl trace publish NAME:TAG',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length !== 2 || positionals[0] !== 'publish') throw new UsageError(`trace takes publish and NAME:TAG; usage: ${this.usage}`)
    const r = await (await daemonFor(ctx)).call('publishTrace', { image: positionals[1]!, ...storeParams(ctx) })
    ctx.out(ctx.json ? JSON.stringify(r) : `published ${r.chunks} chunks of ${positionals[1]} (${r.manifest}) as ${r.key}`)
    return 0
  }
}
