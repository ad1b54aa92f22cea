/** `layerctl pull` and `layerctl export`: an image into the node cache, or out as a root filesystem. */
import { UsageError } from '../../errors.js'
import { parseRef } from '../../format/ref.js'
import type { Command } from '../command.js'
import { absolute, daemonFor, storeParams } from '../daemon-client.js'
import { formatBytes } from '../human-units.js'

export const pullCommand: Command = {
  name: 'pull',
  summary: 'fetch an image\'s manifest and TOCs into the node cache (--all: every chunk too)',
  usage: 'layerctl pull NAME:TAG [--all]',
  options: { all: { type: 'boolean' } },
  async run (ctx, { values, positionals }) {
    if (positionals.length !== 1) throw new UsageError(`pull takes one NAME:TAG; usage: ${this.usage}`)
    parseRef(positionals[0]!)
    const r = await (await daemonFor(ctx)).call(
      'pull', { image: positionals[0], all: values.all === true, ...storeParams(ctx) })
    ctx.out(ctx.json ? JSON.stringify(r) : `${positionals[0]}: ${r.manifest}, ${r.layers} layer(s); fetched ${formatBytes(r.metadataBytes + r.fetchedBytes)}` +
      (values.all === true ? ` (${r.chunks} chunks)` : ''))
    return 0
  }
}

export const exportCommand: Command = {
  name: 'export',
  summary: 'write an image\'s merged root filesystem to a tar file (-o) or an empty directory (-C)',
  usage: 'layerctl export NAME:TAG (-o FILE.tar | -C DIR)',
  options: { output: { type: 'string', short: 'o' }, directory: { type: 'string', short: 'C' } },
  async run (ctx, { values, positionals }) {
    if (positionals.length !== 1 || (values.output === undefined) === (values.directory === undefined)) {
      throw new UsageError(`export takes NAME:TAG and one of -o FILE.tar or -C DIR; usage: ${this.usage}`)
    }
    parseRef(positionals[0]!)
    const target = values.output !== undefined ? { tarFile: absolute(values.output as string) } : { directory: absolute(values.directory as string) }
    const r = await (await daemonFor(ctx)).call(
      'export', { image: positionals[0], ...target, ...storeParams(ctx) })
    ctx.out(ctx.json ? JSON.stringify(r) : `exported ${positionals[0]}: ${r.entries} entries, ${formatBytes(r.contentBytes)}; fetched ${formatBytes(r.fetchedBytes)}`)
    return 0
  }
}
