/** `layerctl push SRC NAME:TAG`: any supported image input into the store. */
import { UsageError } from '../../errors.js'
import { shortDigest } from '../../format/digest.js'
import { formatRef, parseRef } from '../../format/ref.js'
import type { PushedLayer, PushProgress } from '../../image/push.js'
import type { Command, CommandContext } from '../command.js'
import { formatBytes, parseSize } from '../human-units.js'

export const pushCommand: Command = {
  name: 'push',
  summary: 'push an OCI layout, OCI archive, docker-archive, rootfs tar (plain/gzip/zstd) or directory as NAME:TAG',
  usage: 'layerctl push SRC NAME:TAG [--strict] [--max-layer-size SIZE]',
  options: {
    strict: { type: 'boolean' },
    'max-layer-size': { type: 'string' }
  },
  async run (ctx, { values, positionals }) {
    if (positionals.length !== 2) throw new UsageError(`push takes SRC and NAME:TAG; usage: ${this.usage}`)
    const [src, name] = positionals as [string, string]
    const ref = parseRef(name)
    const maxLayer = values['max-layer-size'] === undefined ? undefined : parseSize(values['max-layer-size'] as string)
    if (maxLayer === null || (values['max-layer-size'] !== undefined && maxLayer === undefined)) {
      throw new UsageError(`invalid --max-layer-size ${JSON.stringify(values['max-layer-size'])}: use a size such as 10G`)
    }
    const { pushImage } = await import('../../image/push.js') // loaded on use: other commands start faster
    const started = Date.now()
    const result = await pushImage(src, ref, {
      store: ctx.store(),
      db: ctx.db(),
      strict: values.strict === true,
      ...(maxLayer === undefined ? {} : { limits: { maxLayerBytes: maxLayer } }),
      warn: message => ctx.err(`layerctl push: warning: ${message}`),
      progress: progressPrinter(ctx)
    })
    const seconds = (Date.now() - started) / 1000
    if (ctx.json) {
      ctx.out(JSON.stringify({ ref: formatRef(result.ref), manifest: result.manifest, uploadedBytes: result.uploadedBytes, seconds, layers: result.layers }))
    } else {
      const plain = result.layers.reduce((n, l) => n + l.plainBytes, 0)
      ctx.out(`${formatRef(ref)}: ${result.manifest} — ${formatBytes(plain)} in ${result.layers.length} layer(s), ` +
        `uploaded ${formatBytes(result.uploadedBytes)} in ${seconds.toFixed(1)} s`)
    }
    return 0
  }
}

/** Per-layer result lines on stdout; a live progress line on stderr when it is a terminal. */
function progressPrinter (ctx: CommandContext): PushProgress {
  let lastDraw = 0
  return {
    layerStart: (i, count, name) => { if (ctx.progressTTY) process.stderr.write(`\rlayer ${i + 1}/${count} ${name} …\x1b[K`) },
    layerBytes: (i, bytes) => {
      if (!ctx.progressTTY || Date.now() - lastDraw < 100) return
      lastDraw = Date.now()
      process.stderr.write(`\rlayer ${i + 1}: read ${formatBytes(bytes)}\x1b[K`)
    },
    layerDone: (i, count, l) => {
      if (ctx.progressTTY) process.stderr.write('\r\x1b[K')
      if (!ctx.json) ctx.out(describeLayer(i, count, l))
    }
  }
}

export function describeLayer (i: number, count: number, l: PushedLayer): string {
  if (l.skipped === true) return `layer ${i + 1}/${count} ${shortDigest(l.digest)}: ${formatBytes(l.plainBytes)} in ${l.entries} entries — already stored (same diff_id), not read`
  return `layer ${i + 1}/${count} ${shortDigest(l.digest)}: ${formatBytes(l.plainBytes)} in ${l.entries} entries — ` +
    `new ${formatBytes(l.newPlainBytes)} (uploaded ${formatBytes(l.newStoredBytes)} compressed), ` +
    `deduplicated ${formatBytes(l.dedupPlainBytes)}`
}
