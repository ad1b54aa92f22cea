/**
 * openSource: open whatever a parsed SRC names (source-spec.ts): a registry
 * image, or a file or directory of the kind its transport says (or, for a
 * bare path, whatever it is detected to be).
 *
 * May import: src/errors.ts, src/format/, src/registry/, the modules next to it.
 */
import { BadInputError } from '../../errors.js'
import type { ImageSource, ImageSourceKind, OpenImageSourceOptions } from './image-source.js'
import { ingestContext } from './ingest-policy.js'
import { openImageSource } from './open-image-source.js'
import type { RegistrySourceOptions } from './registry-source.js'
import type { SourceSpec } from './source-spec.js'

export interface OpenSourceOptions extends OpenImageSourceOptions {
  /** For `docker://` sources: transport, credentials, platform. Required for them. */
  registry?: RegistrySourceOptions
}

const EXPECTED_KIND: Record<'oci' | 'oci-archive' | 'docker-archive', ImageSourceKind> = {
  oci: 'oci-layout', 'oci-archive': 'oci-archive', 'docker-archive': 'docker-archive'
}

/** Open `spec`. Async; the errors of openRegistryImage / openImageSource, plus BadInputError when a file is not of its transport's kind. */
export async function openSource (spec: SourceSpec, opts: OpenSourceOptions = {}): Promise<ImageSource> {
  if (spec.transport === 'docker') {
    // Loaded on use: the registry client (undici, ~110 modules) is a fifth of a directory push's start-up.
    const { openRegistryImage } = await import('./registry-source.js')
    return await openRegistryImage(spec.reference, ingestContext(opts), opts.registry ?? { env: {} })
  }
  if (spec.transport === 'path') return await openImageSource(spec.path, opts)
  const tag = spec.transport === 'docker-archive' ? spec.ref : spec.tag
  const prefer = spec.transport === 'oci' ? undefined : spec.transport
  const source = await openImageSource(spec.path, { ...opts, ...(tag === undefined ? {} : { tag }), ...(prefer === undefined ? {} : { prefer }) })
  const want = EXPECTED_KIND[spec.transport]
  if (source.kind !== want) {
    await source.close()
    throw new BadInputError(`cannot push ${spec.transport}:${spec.path}: ${spec.path} is not an ${want === 'oci-layout' ? 'OCI layout' : want === 'oci-archive' ? 'OCI archive' : 'docker-archive'} (it reads as a ${source.kind})`)
  }
  return source
}
