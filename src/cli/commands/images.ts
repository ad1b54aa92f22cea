/** `layerctl images`, `tag`, `history`, `rm`: refs and their versions. */
import { UsageError } from '../../errors.js'
import { shortDigest } from '../../format/digest.js'
import { formatRef, parseRef } from '../../format/ref.js'
import { deleteRef, listRefs, readRef, resolveRef } from '../../image/refs.js'
import { tagImage } from '../../image/tag-image.js'
import type { Command } from '../command.js'
import { isSandboxId, removeSandboxes } from './sandboxes.js'

export const imagesCommand: Command = {
  name: 'images',
  summary: 'list images (NAME:TAG, manifest, when pushed)',
  usage: 'layerctl images [--json]',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length > 0) throw new UsageError(`images takes no arguments; usage: ${this.usage}`)
    const store = ctx.store()
    const rows = []
    for (const ref of await listRefs(store)) {
      const record = await readRef(store, ref)
      if (record === undefined) continue
      rows.push({ ref: formatRef(ref), manifest: record.history[0]!.manifest, updated: record.history[0]!.at, versions: record.history.length })
    }
    if (ctx.json) { ctx.out(JSON.stringify(rows)); return 0 }
    const w = Math.max(10, ...rows.map(r => r.ref.length))
    ctx.out(`${'IMAGE'.padEnd(w)}  ${'MANIFEST'.padEnd(19)}  ${'UPDATED'.padEnd(24)}  VERSIONS`)
    for (const r of rows) ctx.out(`${r.ref.padEnd(w)}  ${shortDigest(r.manifest)}  ${r.updated.padEnd(24)}  ${r.versions}`)
    return 0
  }
}

export const tagCommand: Command = {
  name: 'tag',
  summary: 'make TARGET:TAG name the same image as SOURCE:TAG',
  usage: 'layerctl tag SOURCE:TAG TARGET:TAG',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length !== 2) throw new UsageError(`tag takes SOURCE and TARGET; usage: ${this.usage}`)
    const [source, target] = positionals.map(parseRef) as [ReturnType<typeof parseRef>, ReturnType<typeof parseRef>]
    const digest = await tagImage(ctx.store(), source, target)
    if (!ctx.json) ctx.out(`${formatRef(target)} -> ${digest}`)
    else ctx.out(JSON.stringify({ ref: formatRef(target), manifest: digest }))
    return 0
  }
}

export const historyCommand: Command = {
  name: 'history',
  summary: 'list the versions NAME:TAG has named, newest first',
  usage: 'layerctl history NAME:TAG [--json]',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length !== 1) throw new UsageError(`history takes one NAME:TAG; usage: ${this.usage}`)
    const ref = parseRef(positionals[0]!)
    const record = await readRef(ctx.store(), ref)
    if (record === undefined) await resolveRef(ctx.store(), ref) // throws the standard not-found error
    if (ctx.json) { ctx.out(JSON.stringify(record!.history)); return 0 }
    record!.history.forEach((v, i) => ctx.out(`${i === 0 ? '*' : ' '} ${v.at}  ${v.manifest}`))
    return 0
  }
}

export const rmCommand: Command = {
  name: 'rm',
  summary: 'remove sandboxes (by id) and image refs (NAME:TAG; `layerctl gc store` frees the objects no ref needs any more)',
  usage: 'layerctl rm SANDBOX|NAME:TAG…',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length === 0) throw new UsageError(`rm takes sandbox ids or NAME:TAGs; usage: ${this.usage}`)
    await removeSandboxes(ctx, positionals.filter(isSandboxId))
    const refs = positionals.filter(p => !isSandboxId(p)).map(parseRef)
    for (const ref of refs) {
      await deleteRef(ctx.store(), ref)
      if (!ctx.json) ctx.out(`removed ${formatRef(ref)}`)
    }
    return 0
  }
}
