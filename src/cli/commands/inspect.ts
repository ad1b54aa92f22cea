/** `layerctl inspect NAME:TAG` and `layerctl rebase NAME:TAG --onto BASE:TAG`. */
import { UsageError } from '../../errors.js'
import { shortDigest } from '../../format/digest.js'
import { formatRef, parseRef } from '../../format/ref.js'
import type { Command } from '../command.js'
import { formatBytes } from '../human-units.js'

export const inspectCommand: Command = {
  name: 'inspect',
  summary: 'show an image\'s layers, sizes, config and dedup',
  usage: 'layerctl inspect NAME:TAG [--json]',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length !== 1) throw new UsageError(`inspect takes one NAME:TAG; usage: ${this.usage}`)
    const [{ inspectImage }, { loadImage }, { readRef }] = await Promise.all([import('../../image/inspect.js'), import('../../image/load-image.js'), import('../../image/refs.js')])
    const ref = parseRef(positionals[0]!)
    const image = await loadImage(ctx.store(), ref)
    const version = (await readRef(ctx.store(), ref))?.history.find(v => v.manifest === image.digest)
    const report = { ...inspectImage(image), ...(version?.source === undefined ? {} : { source: version.source }) }
    if (ctx.json) { ctx.out(JSON.stringify(report, null, 2)); return 0 }
    ctx.out(`manifest   ${report.manifest}`)
    if (report.source !== undefined) {
      const s = report.source
      ctx.out(`source     ${s.reference}${s.manifest === undefined ? '' : ` (manifest ${s.manifest}${s.index === undefined ? '' : `, from index ${s.index}`})`}`)
    }
    ctx.out(`size       ${formatBytes(report.imageBytes)} of file content, ${formatBytes(report.storedBytes)} stored (compressed, distinct chunks)`)
    ctx.out(`dedup      ${report.dedupRatio.toFixed(2)}x within the image`)
    report.layers.forEach((l, i) => ctx.out(`layer ${i + 1}    ${shortDigest(l.digest)}  ${formatBytes(l.plainBytes).padStart(9)}  ` +
      `${formatBytes(l.storedBytes).padStart(9)} stored  ${l.entries} entries  ${l.chunks} chunks`))
    const c = report.config.config ?? {}
    if (c.Entrypoint != null) ctx.out(`entrypoint ${JSON.stringify(c.Entrypoint)}`)
    if (c.Cmd != null) ctx.out(`cmd        ${JSON.stringify(c.Cmd)}`)
    if (c.WorkingDir !== undefined && c.WorkingDir !== '') ctx.out(`workdir    ${c.WorkingDir}`)
    if (c.User !== undefined && c.User !== '') ctx.out(`user       ${c.User}`)
    for (const e of c.Env ?? []) ctx.out(`env        ${e}`)
    if (report.base !== undefined) ctx.out(`base       ${report.base.ref} (${shortDigest(report.base.manifest)}, ${report.base.layers} layers)`)
    return 0
  }
}

export const rebaseCommand: Command = {
  name: 'rebase',
  summary: 'put NAME:TAG\'s own layers on the newest version of its base, without re-uploading them',
  usage: 'layerctl rebase NAME:TAG --onto BASE:TAG',
  options: { onto: { type: 'string' } },
  async run (ctx, { values, positionals }) {
    if (positionals.length !== 1 || typeof values.onto !== 'string') throw new UsageError(`rebase takes NAME:TAG and --onto BASE:TAG; usage: ${this.usage}`)
    const ref = parseRef(positionals[0]!)
    const { rebaseImage } = await import('../../image/rebase.js')
    const r = await rebaseImage(ctx.store(), ref, parseRef(values.onto))
    if (ctx.json) { ctx.out(JSON.stringify(r)); return 0 }
    ctx.out(r.changed
      ? `${formatRef(ref)}: ${r.ownLayers} own layer(s) now on ${values.onto} (${r.newBaseLayers} base layer(s), was ${r.oldBaseLayers}) as ${r.manifest}; nothing re-uploaded`
      : `${formatRef(ref)} already sits on the newest ${values.onto}; unchanged`)
    return 0
  }
}
