/**
 * Registry image references, as docker and skopeo read them:
 * `HOST[:PORT]/REPO[:TAG|@sha256:…]` (after a `docker://` transport prefix).
 *
 * The first path component is a registry host when it contains a `.` or a
 * `:`, or is `localhost`; otherwise the image is on Docker Hub
 * (`docker.io`), where a single name gets `library/` (`python` →
 * `docker.io/library/python`). `docker.io` is served at
 * `registry-1.docker.io`. Without a tag or digest the tag is `latest`.
 *
 * Pure: no fs, network or native code. May import: src/errors.ts, src/format/.
 */
import { BadInputError } from '../errors.js'
import { isDigest, type Digest } from '../format/digest.js'

export interface RegistryReference {
  /** Registry as the user names it, normalized (`docker.io` for Docker Hub): the key for credentials. */
  registry: string
  /** host[:port] actually contacted (`registry-1.docker.io` for `docker.io`). */
  endpoint: string
  /** Repository path, e.g. `library/python`. */
  repository: string
  /** Tag, when given (or `latest` when neither tag nor digest is). */
  tag?: string
  /** Manifest digest, when given; it wins over the tag. */
  digest?: Digest
}

export const DOCKER_HUB = 'docker.io'
const DOCKER_HUB_ENDPOINT = 'registry-1.docker.io'
const DOCKER_HUB_ALIASES = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io'])
// distribution's reference grammar: lowercase components separated by '.', '_', '__' or '-'s.
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$/
const TAG = /^[\w][\w.-]{0,127}$/
const HOST = /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$/

/**
 * Parse `HOST[:PORT]/REPO[:TAG][@DIGEST]` (no `docker://` prefix). Sync.
 * Throws BadInputError naming the input and what is wrong with it.
 */
export function parseRegistryReference (input: string): RegistryReference {
  const fail = (why: string): never => { throw new BadInputError(`invalid registry reference ${JSON.stringify(input)}: ${why}`) }
  if (input === '') fail('it is empty')
  let rest = input
  let digest: Digest | undefined
  const at = rest.indexOf('@')
  if (at >= 0) {
    const d = rest.slice(at + 1)
    if (!isDigest(d)) fail(`${JSON.stringify(d)} is not a sha256 digest (sha256:<64 hex>)`)
    digest = d as Digest
    rest = rest.slice(0, at)
  }
  let tag: string | undefined
  const lastSlash = rest.lastIndexOf('/')
  const colon = rest.lastIndexOf(':')
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1)
    rest = rest.slice(0, colon)
    if (!TAG.test(tag)) fail(`tag ${JSON.stringify(tag)} is not valid (letters, digits, '_', '.', '-'; at most 128)`)
  }
  const parts = rest.split('/')
  let registry = DOCKER_HUB
  const first = parts[0]!
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    if (!HOST.test(first)) fail(`registry host ${JSON.stringify(first)} is not valid`)
    registry = DOCKER_HUB_ALIASES.has(first.toLowerCase()) ? DOCKER_HUB : first
    parts.shift()
  }
  if (parts.length === 0 || parts.some(p => !PATH_COMPONENT.test(p))) {
    fail('the repository must be lowercase path components (letters, digits, and single ".", "_", "__" or "-" separators)')
  }
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift('library')
  const ref: RegistryReference = {
    registry,
    endpoint: registry === DOCKER_HUB ? DOCKER_HUB_ENDPOINT : registry,
    repository: parts.join('/')
  }
  if (digest !== undefined) ref.digest = digest
  if (tag !== undefined) ref.tag = tag
  else if (digest === undefined) ref.tag = 'latest'
  return ref
}

/** `docker://registry/repository:tag@digest` (the parts that are set). */
export function formatRegistryReference (ref: Pick<RegistryReference, 'registry' | 'repository' | 'tag' | 'digest'>): string {
  return `docker://${ref.registry}/${ref.repository}${ref.tag === undefined ? '' : `:${ref.tag}`}${ref.digest === undefined ? '' : `@${ref.digest}`}`
}
