/** `layerctl run`, `ps`, `commit`, and what `gc sandboxes` does: sandboxes on this node. */
import { UsageError } from '../../errors.js'
import { formatRef, parseRef } from '../../format/ref.js'
import type { ImageSource } from '../../image/sources/image-source.js'
import { SandboxRegistry } from '../../runtime/sandbox-registry.js'
import { parseTier, type SandboxLimits } from '../../runtime/sandbox.js'
import type { Command, CommandContext } from '../command.js'
import { formatBytes, parseSize } from '../human-units.js'

// The sandbox, push and runtime modules load on use: every other command starts faster without them.

/** Exit code of `run` when layerctl itself fails (docker's convention), so it never looks like the command's own. */
export const EXIT_RUN_FAILED = 125

const SANDBOX_ID_RE = /^sb-[0-9a-f]{12}$/
export const isSandboxId = (s: string): boolean => SANDBOX_ID_RE.test(s)

export const runCommand: Command = {
  name: 'run',
  summary: 'run a command in a new sandbox of the image; stdout, stderr and the exit code come back',
  usage: 'layerctl run [--tier process|container|microvm|vm] [--disk SIZE] [--memory SIZE] [--pids N] [--runtime runc|crun] ' +
    '[--env K=V]… [--workdir DIR] [--user U] [--timeout SECONDS] [--keep] NAME:TAG [-- CMD…]',
  failureExitCode: EXIT_RUN_FAILED,
  options: {
    tier: { type: 'string', default: 'process' },
    disk: { type: 'string' },
    memory: { type: 'string' },
    pids: { type: 'string' },
    runtime: { type: 'string' },
    env: { type: 'string', multiple: true },
    workdir: { type: 'string' },
    user: { type: 'string' },
    timeout: { type: 'string' },
    keep: { type: 'boolean' }
  },
  async run (ctx, { values, positionals }) {
    const [image, ...cmd] = positionals
    if (image === undefined) throw new UsageError(`run takes NAME:TAG; usage: ${this.usage}`)
    parseRef(image)
    const tier = parseTier(values.tier as string)
    const runtime = values.runtime as string | undefined
    if (runtime !== undefined && runtime !== 'runc' && runtime !== 'crun') throw new UsageError(`invalid --runtime ${JSON.stringify(runtime)}: use runc or crun`)
    const { createSandbox } = await import('../../sandbox/create-sandbox.js')
    const sandbox = await createSandbox({
      image, tier, keep: values.keep === true, limits: limitsFrom(values),
      home: ctx.settings.home, store: ctx.settings.store, vm: ctx.settings.vm, startDaemon: !ctx.inDaemon,
      ...(ctx.settings.s3Endpoint === undefined ? {} : { s3Endpoint: ctx.settings.s3Endpoint }),
      ...(runtime === undefined ? {} : { runtime })
    })
    const forget = values.keep === true ? () => {} : ctx.onCallerGone(async () => { await sandbox.destroy() })
    try {
      const timeout = values.timeout === undefined ? undefined : Number(values.timeout)
      if (timeout !== undefined && !(timeout > 0)) throw new UsageError(`invalid --timeout ${JSON.stringify(values.timeout)}: use a number of seconds`)
      const result = await sandbox.exec({
        cmd,
        stdout: ctx.stdio.stdout,
        stderr: ctx.stdio.stderr,
        ...(values.env === undefined ? {} : { env: values.env as string[] }),
        ...(values.workdir === undefined ? {} : { cwd: values.workdir as string }),
        ...(values.user === undefined ? {} : { user: values.user as string }),
        ...(timeout === undefined ? {} : { timeoutMs: timeout * 1000 })
      })
      if (values.keep === true) ctx.err(`layerctl run: kept sandbox ${sandbox.id} (layerctl commit ${sandbox.id} NAME:TAG; layerctl rm ${sandbox.id})`)
      if (result.timedOut) ctx.err(`layerctl run: the command timed out after ${values.timeout as string} s and was killed`)
      return result.exitCode
    } finally {
      forget()
      if (values.keep !== true) await sandbox.destroy()
    }
  }
}

function limitsFrom (values: Record<string, unknown>): Partial<SandboxLimits> {
  const size = (flag: string): number | undefined => {
    const v = values[flag] as string | undefined
    if (v === undefined) return undefined
    const n = parseSize(v)
    if (n === undefined || n <= 0) throw new UsageError(`invalid --${flag} ${JSON.stringify(v)}: use a size such as 512M or 2G`)
    return n
  }
  const pids = values.pids === undefined ? undefined : Number(values.pids)
  if (pids !== undefined && !(Number.isSafeInteger(pids) && pids > 0)) throw new UsageError(`invalid --pids ${JSON.stringify(values.pids)}: use a positive whole number`)
  const disk = size('disk')
  const memory = size('memory')
  return { ...(disk === undefined ? {} : { diskBytes: disk }), ...(memory === undefined ? {} : { memoryBytes: memory }), ...(pids === undefined ? {} : { pids }) }
}

export const psCommand: Command = {
  name: 'ps',
  summary: 'list the sandboxes on this node (active, kept, or orphaned by a crashed caller)',
  usage: 'layerctl ps [--json]',
  options: {},
  async run (ctx) {
    const rows = new SandboxRegistry(ctx.db()).list().map(r => ({ ...r, status: SandboxRegistry.status(r) }))
    if (ctx.json) { ctx.out(JSON.stringify(rows)); return 0 }
    ctx.out(`${'SANDBOX'.padEnd(15)}  ${'TIER'.padEnd(9)}  ${'STATUS'.padEnd(8)}  ${'CREATED'.padEnd(24)}  IMAGE`)
    for (const r of rows) ctx.out(`${r.id.padEnd(15)}  ${r.tier.padEnd(9)}  ${r.status.padEnd(8)}  ${r.createdAt.padEnd(24)}  ${r.image}`)
    return 0
  }
}

/** Remove sandboxes by id (used by `layerctl rm` for arguments that are sandbox ids). */
export async function removeSandboxes (ctx: CommandContext, ids: string[]): Promise<void> {
  if (ids.length === 0) return
  const { cleanupSandbox } = await import('../../runtime/sandbox-cleanup.js')
  const registry = new SandboxRegistry(ctx.db())
  for (const id of ids) {
    const r = registry.get(id)
    await cleanupSandbox(r)
    registry.remove(id)
    if (!ctx.json) ctx.out(`removed sandbox ${id}`)
  }
}

/** `gc sandboxes`: remove the sandboxes whose caller is gone; errors go to stderr, and count in `failed`. */
export async function collectSandboxes (ctx: CommandContext): Promise<{ removed: string[], failed: number }> {
  const { removeOrphanedSandboxes } = await import('../../runtime/sandbox-cleanup.js')
  return await removeOrphanedSandboxes(ctx.db(), line => ctx.err(`layerctl gc: ${line}`))
}

export const commitCommand: Command = {
  name: 'commit',
  summary: 'turn a process or container sandbox\'s changes into a new layer on its image, pushed as NAME:TAG',
  usage: 'layerctl commit SANDBOX NAME:TAG',
  options: {},
  async run (ctx, { positionals }) {
    if (positionals.length !== 2) throw new UsageError(`commit takes SANDBOX and NAME:TAG; usage: ${this.usage}`)
    const record = new SandboxRegistry(ctx.db()).get(positionals[0]!)
    if (record.tier !== 'process' && record.tier !== 'container') {
      throw new UsageError(`cannot commit sandbox ${record.id}: commit reads the writable layer of process and container sandboxes; this one is ${record.tier}`)
    }
    const ref = parseRef(positionals[1]!)
    const [{ loadImage }, { pushSource }, { UpperLayerSource }, { overlayPaths }] = await Promise.all([
      import('../../image/load-image.js'), import('../../image/push.js'),
      import('../../image/sources/upper-layer-source.js'), import('../../runtime/overlay/sandbox-overlay.js')
    ])
    const base = await loadImage(ctx.store(), record.manifest)
    const layer = new UpperLayerSource(overlayPaths(record.stateDir).upperDir)
    const source: ImageSource = { kind: 'directory', name: `sandbox ${record.id}`, config: base.manifest.config, layers: [layer], close: async () => {} }
    const result = await pushSource(source, ref, {
      store: ctx.store(), db: ctx.db(), onto: { image: base, name: record.image, createdBy: `layerctl commit ${record.id}` }
    })
    const l = result.layers[0]!
    ctx.out(ctx.json
      ? JSON.stringify(result)
      : `${formatRef(ref)}: ${result.manifest} — ${record.image} + 1 layer (${l.entries} entries, ${formatBytes(l.plainBytes)}; uploaded ${formatBytes(result.uploadedBytes)})`)
    return 0
  }
}
