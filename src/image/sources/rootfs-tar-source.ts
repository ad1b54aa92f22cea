/**
 * A plain root filesystem tar (uncompressed, gzip or zstd; detected by magic
 * bytes) as a one-layer image with a minimal linux/amd64 config. Also the
 * home of that minimal config, shared with directory sources.
 *
 * May import: src/errors.ts, src/format/, the modules next to it.
 */
import { createReadStream } from 'node:fs'
import { basename } from 'node:path'
import type { Digest } from '../../format/digest.js'
import type { OciImageConfig } from '../../format/manifest.js'
import type { ImageSource } from './image-source.js'
import type { IngestContext } from './ingest-policy.js'
import { LAYER_READ_BYTES, TarLayerSource } from './layer-tar.js'

export const DEFAULT_PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

/** The config given to images that come without one. `diffIds` is kept by reference, so it can be completed later. */
export function minimalConfig (diffIds: Digest[]): OciImageConfig {
  return {
    architecture: 'amd64',
    os: 'linux',
    config: { Env: [DEFAULT_PATH_ENV] },
    rootfs: { type: 'layers', diff_ids: diffIds }
  }
}

/**
 * A one-layer image read from the tar at `path` (`size` bytes). Sync; nothing
 * is read until the layer's entries are. `config.rootfs.diff_ids` is filled
 * in once the layer has been read to the end.
 */
export function openRootfsTar (path: string, size: number, ctx: IngestContext): ImageSource {
  const diffIds: Digest[] = []
  const layer = new TarLayerSource({
    name: `tar ${path}, layer 1 of 1 (${basename(path)})`,
    inputBytes: size,
    open: () => createReadStream(path, { highWaterMark: LAYER_READ_BYTES }),
    blobSize: size,
    onDiffId: d => { diffIds[0] = d }
  }, ctx)
  return { kind: 'rootfs-tar', name: path, config: minimalConfig(diffIds), layers: [layer], close: async () => {} }
}
