/** `layerctl pull` and `layerctl export`: an image into the node cache, or out as a root filesystem. */
import { UsageError } from '../../errors.js'
import { parseRef } from '../../format/ref.js'
import type { Command, CommandArgs, CommandContext } from '../command.js'
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
  summary: 'write an image\'s merged root filesystem to a tar file (-o) or an empty directory (-C), or the image itself (--format oci|oci-archive|docker-archive -o PATH)',
  usage: 'layerctl export NAME:TAG (-o FILE.tar | -C DIR | --format oci|oci-archive|docker-archive -o PATH)',
  options: { output: { type: 'string', short: 'o' }, directory: { type: 'string', short: 'C' }, format: { type: 'string' } },
  async run (ctx, { values, positionals }) {
    if (values.format !== undefined) return await exportImageFormat(ctx, values, positionals, this.usage)
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

/** `export --format …`: the image itself, read from the store in this process (chunks verified as they are read). */
async function exportImageFormat (ctx: CommandContext, values: CommandArgs['values'], positionals: string[], usage: string): Promise<number> {
  const { IMAGE_EXPORT_FORMATS, exportImageLayout } = await import('../../materialize/export-layout.js')
  const format = values.format as string
  if (!(IMAGE_EXPORT_FORMATS as readonly string[]).includes(format)) throw new UsageError(`invalid --format ${JSON.stringify(format)}: use ${IMAGE_EXPORT_FORMATS.join(', ')}`)
  if (positionals.length !== 1 || typeof values.output !== 'string' || values.directory !== undefined) {
    throw new UsageError(`export --format takes NAME:TAG and -o PATH; usage: ${usage}`)
  }
  const ref = parseRef(positionals[0]!)
  const [{ loadImage }, { loadTarSplit }, { ChunkFetcher }, { MemoryChunkCache }] = await Promise.all([
    import('../../image/load-image.js'), import('../../image/tar-splits.js'), import('../../cache/chunk-fetcher.js'), import('../../cache/memory-chunk-cache.js')])
  const store = ctx.store()
  const image = await loadImage(store, ref)
  const fetcher = new ChunkFetcher(store, new MemoryChunkCache())
  try {
    const r = await exportImageLayout(image, ref, fetcher, format as typeof IMAGE_EXPORT_FORMATS[number], absolute(values.output), {
      tarSplit: async toc => await loadTarSplit(store, toc)
    })
    const bytes = r.layers.reduce((n, l) => n + l.size, 0)
    const exact = r.layers.filter(l => l.exact).length
    ctx.out(ctx.json
      ? JSON.stringify(r)
      : `exported ${positionals[0]} as ${format} ${r.path}: ${r.layers.length} layer(s), ${formatBytes(bytes)}, ${exact === r.layers.length ? 'every layer its original tar, byte for byte' : `${exact} of ${r.layers.length} layer(s) their original tar (the others written from the TOC)`}; manifest ${r.manifest}`)
  } finally {
    await fetcher.close()
  }
  return 0
}
