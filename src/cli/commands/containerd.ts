/**
 * `layerctl containerd pull NAME:TAG [--address SOCK] [--namespace NS] [--name REF]`
 * and `layerctl containerd config`: layerd images in a containerd, and the
 * containerd settings a node needs (src/snapshotter/README.md). The pull of a
 * layerd image is a call to layerd (the `containerdPull` control method); a
 * `docker://` image is pulled here, with the caller's registry credentials.
 */
import { UsageError } from '../../errors.js'
import { parseRef } from '../../format/ref.js'
import { isDigest } from '../../format/digest.js'
import { DEFAULT_CONTAINERD_ADDRESS, SNAPSHOTTER_NAME, snapshotterSocketPath } from '../../snapshotter/snapshotter-paths.js'
import type { Command } from '../command.js'
import { absolute, daemonFor, storeParams } from '../daemon-client.js'
import type { ContainerdPullResult } from '../../daemon/client/control-protocol.js'

const USAGE = 'layerctl containerd pull (NAME:TAG | docker://HOST/REPO:TAG) [--address SOCK] [--namespace NS] [--name REF] [--tls-verify=false] | layerctl containerd config'

/** The `version = 2` config fragment: layerd as a proxy snapshotter, and CRI using it with the annotations the remote path needs. */
export function containerdConfigStanza (home: string): string {
  return [
    `# layerd's snapshotter for containerd (add to /etc/containerd/config.toml, version = 2, then restart containerd)`,
    '[proxy_plugins]',
    `  [proxy_plugins.${SNAPSHOTTER_NAME}]`,
    '    type = "snapshot"',
    `    address = "${snapshotterSocketPath(home)}"`,
    '',
    '# Kubernetes (CRI): pull and run with layerd; the snapshot annotations carry each layer\'s digest to it',
    '[plugins."io.containerd.grpc.v1.cri".containerd]',
    `  snapshotter = "${SNAPSHOTTER_NAME}"`,
    '  disable_snapshot_annotations = false',
    ''
  ].join('\n')
}

export const containerdCommand: Command = {
  name: 'containerd',
  summary: 'pull a layerd image into containerd with lazy layers (pull), or print the containerd settings (config)',
  usage: USAGE,
  options: { address: { type: 'string' }, namespace: { type: 'string' }, name: { type: 'string' }, 'tls-verify': { type: 'string' } },
  async run (ctx, { values, positionals }) {
    const [sub, ...rest] = positionals
    if (sub === 'config') {
      if (rest.length !== 0) throw new UsageError(`containerd config takes no arguments; usage: ${USAGE}`)
      ctx.out(containerdConfigStanza(ctx.settings.home))
      return 0
    }
    if (sub !== 'pull' || rest.length !== 1) throw new UsageError(`usage: ${USAGE}`)
    const image = rest[0]!
    if (!isDigest(image) && !image.startsWith('docker://')) parseRef(image)
    const tls = values['tls-verify'] as string | undefined
    if (tls !== undefined && tls !== 'true' && tls !== 'false') throw new UsageError(`--tls-verify takes true or false, got ${JSON.stringify(tls)}`)
    const address = absolute((values.address as string | undefined) ?? ctx.env.CONTAINERD_ADDRESS ?? DEFAULT_CONTAINERD_ADDRESS)
    const namespace = (values.namespace as string | undefined) ?? ctx.env.CONTAINERD_NAMESPACE ?? 'default'
    const name = values.name as string | undefined
    let r: ContainerdPullResult
    if (image.startsWith('docker://')) {
      // A registry image: its manifest and config are read here, with the caller's registry credentials and TLS settings.
      // Loaded here: gRPC and the protos cost every other layerctl command ~0.1 s otherwise.
      const { containerdPull } = await import('../../snapshotter/containerd-pull.js')
      r = await containerdPull({
        image, store: ctx.store(), address, namespace, ...(name === undefined ? {} : { name }), registry: { tlsVerify: tls !== 'false', env: ctx.env }
      })
    } else {
      // A layerd image: the daemon pulls it (its store is open and warm, containerd's protos are loaded).
      if (tls !== undefined) throw new UsageError('--tls-verify is for a docker:// image; a layerd image is read from layerd\'s store')
      r = await (await daemonFor(ctx)).call('containerdPull', { image, address, namespace, ...(name === undefined ? {} : { name }), ...storeParams(ctx) })
    }
    ctx.out(ctx.json ? JSON.stringify(r) : `${r.name}: ${r.manifest}, ${r.layers} layer(s) served lazily by layerd (${r.remote} prepared, ${r.alreadyThere} already there) in ${(r.ms / 1000).toFixed(2)} s`)
    return 0
  }
}
