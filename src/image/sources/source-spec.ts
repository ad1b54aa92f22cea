/**
 * What `layerctl push SRC` names, in the containers-transports syntax
 * (as skopeo writes it):
 *
 * | SRC                                  | source |
 * |--------------------------------------|--------|
 * | `docker://HOST[:PORT]/REPO[:TAG\|@sha256:…]` | a registry image (reference.ts) |
 * | `oci:DIR[:TAG]`                      | an OCI image layout; TAG picks among several (ref.name annotation) |
 * | `oci-archive:FILE[:TAG]`             | an OCI archive (a tar of a layout) |
 * | `docker-archive:FILE[:REF]`          | a docker-archive; REF (`repo:tag` or `tag`) picks among several |
 * | anything else                        | a path, its kind detected (open-image-source.ts) |
 *
 * As in containers/image, the path ends at the first `:` after the
 * transport (a path with a `:` must be given bare, or as `./…` if it
 * starts like a transport).
 *
 * Pure: no fs, network or native code. May import: src/errors.ts, src/registry/reference.ts.
 */
import { UsageError } from '../../errors.js'
import { parseRegistryReference, type RegistryReference } from '../../registry/reference.js'

export type SourceSpec =
  | { transport: 'docker', reference: RegistryReference }
  | { transport: 'oci' | 'oci-archive', path: string, tag?: string }
  | { transport: 'docker-archive', path: string, ref?: string }
  | { transport: 'path', path: string }

const FILE_TRANSPORTS = ['oci-archive', 'oci', 'docker-archive'] as const

/** Parse SRC. Sync; UsageError/BadInputError naming SRC when it is malformed. */
export function parseSourceSpec (text: string): SourceSpec {
  if (text.startsWith('docker://')) return { transport: 'docker', reference: parseRegistryReference(text.slice('docker://'.length)) }
  for (const transport of FILE_TRANSPORTS) {
    if (!text.startsWith(`${transport}:`)) continue
    const rest = text.slice(transport.length + 1)
    const colon = rest.indexOf(':')
    const path = colon < 0 ? rest : rest.slice(0, colon)
    const selector = colon < 0 ? undefined : rest.slice(colon + 1)
    if (path === '') throw new UsageError(`invalid source ${JSON.stringify(text)}: ${transport}: needs a path (${transport}:PATH[:${transport === 'docker-archive' ? 'REF' : 'TAG'}])`)
    if (selector === '') throw new UsageError(`invalid source ${JSON.stringify(text)}: empty ${transport === 'docker-archive' ? 'reference' : 'tag'} after the path`)
    if (transport === 'docker-archive') return { transport, path, ...(selector === undefined ? {} : { ref: selector }) }
    return { transport, path, ...(selector === undefined ? {} : { tag: selector }) }
  }
  if (/^[a-z][a-z0-9-]*:\/\//.test(text) || /^(docker|containers-storage|dir|docker-daemon|ostree|sif):/.test(text)) {
    throw new UsageError(`invalid source ${JSON.stringify(text)}: layerd reads docker://, oci:, oci-archive:, docker-archive: and paths`)
  }
  return { transport: 'path', path: text }
}
