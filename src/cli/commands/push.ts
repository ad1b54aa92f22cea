/** `layerctl push SRC NAME:TAG`: any supported image input into the store. */
import { setFlagsFromString } from 'node:v8'
import { UsageError } from '../../errors.js'
import { shortDigest } from '../../format/digest.js'
import { formatRef, parseRef } from '../../format/ref.js'
import type { PushedLayer, PushProgress } from '../../image/push.js'
import type { Command, CommandContext } from '../command.js'
import { formatBytes, parseSize } from '../human-units.js'

export const pushCommand: Command = {
  name: 'push',
  summary: 'push a registry image (docker://), OCI layout or archive, docker-archive, rootfs tar (plain/gzip/zstd) or directory as NAME:TAG',
  usage: 'layerctl push SRC NAME:TAG [--strict] [--max-layer-size SIZE] [--platform OS/ARCH[/VARIANT]] [--creds USER:PASS] [--cert-dir DIR] [--tls-verify=false]\n' +
    '  SRC: docker://HOST[:PORT]/REPO[:TAG|@DIGEST] | oci:DIR[:TAG] | oci-archive:FILE[:TAG] | docker-archive:FILE[:REF] | PATH',
  options: {
    strict: { type: 'boolean' },
    'max-layer-size': { type: 'string' },
    platform: { type: 'string' },
    creds: { type: 'string' },
    'cert-dir': { type: 'string' },
    'tls-verify': { type: 'string' }
  },
  async run (ctx, { values, positionals }) {
    if (positionals.length !== 2) throw new UsageError(`push takes SRC and NAME:TAG; usage: ${this.usage}`)
    const [src, name] = positionals as [string, string]
    const ref = parseRef(name)
    const maxLayer = values['max-layer-size'] === undefined ? undefined : parseSize(values['max-layer-size'] as string)
    if (maxLayer === null || (values['max-layer-size'] !== undefined && maxLayer === undefined)) {
      throw new UsageError(`invalid --max-layer-size ${JSON.stringify(values['max-layer-size'])}: use a size such as 10G`)
    }
    const tlsVerify = values['tls-verify'] === undefined ? true : parseBool(values['tls-verify'] as string, '--tls-verify')
    const [{ pushImage }, { parsePlatform }] = await Promise.all([import('../../image/push.js'), import('../../registry/manifests.js')]) // loaded on use: other commands start faster
    const registry = {
      env: process.env,
      tlsVerify,
      ...(typeof values.creds === 'string' ? { creds: values.creds } : {}),
      ...(typeof values['cert-dir'] === 'string' ? { certDir: values['cert-dir'] } : {}),
      ...(typeof values.platform === 'string' ? { platform: parsePlatform(values.platform) } : {})
    }
    const started = Date.now()
    const result = await pushImage(src, ref, {
      store: ctx.store(),
      db: ctx.db(),
      registry,
      strict: values.strict === true,
      ...(maxLayer === undefined ? {} : { limits: { maxLayerBytes: maxLayer } }),
      warn: message => ctx.err(`layerctl push: warning: ${message}`),
      progress: progressPrinter(ctx),
      opened: source => { if (source.kind === 'directory') setFlagsFromString(DIRECTORY_PUSH_V8_FLAGS) }
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

/**
 * V8 flags for a directory push, set once its source is open. Such a push is a
 * short process whose heavy work is native (zstd, sha256, FastCDC, file
 * reads on the workers; lstat and readdir on the main thread): TurboFan's
 * compiles, on V8's background threads that compete with the workers for the
 * cores, cost it more CPU than their code wins back (~12% of its CPU samples
 * in `perf`; without them -7.5% CPU, bench/README.md). A tar input (archives,
 * registries) parses tar in JS on the main thread and keeps TurboFan (there
 * the flag cost ~5% CPU), and so does layerd (commits).
 */
const DIRECTORY_PUSH_V8_FLAGS = '--no-opt'

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

function parseBool (text: string, flag: string): boolean {
  if (text === 'true') return true
  if (text === 'false') return false
  throw new UsageError(`invalid ${flag}=${text}: use ${flag}=true or ${flag}=false`)
}

export function describeLayer (i: number, count: number, l: PushedLayer): string {
  if (l.skipped === true) return `layer ${i + 1}/${count} ${shortDigest(l.digest)}: ${formatBytes(l.plainBytes)} in ${l.entries} entries — already stored (same ${l.skippedBy === 'blob' ? 'blob digest' : 'diff_id'}), not read`
  return `layer ${i + 1}/${count} ${shortDigest(l.digest)}: ${formatBytes(l.plainBytes)} in ${l.entries} entries — ` +
    `new ${formatBytes(l.newPlainBytes)} (uploaded ${formatBytes(l.newStoredBytes)} compressed), ` +
    `deduplicated ${formatBytes(l.dedupPlainBytes)}`
}
