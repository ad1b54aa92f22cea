/**
 * RegistryClient: the OCI distribution API for one repository (pull side):
 * manifests by tag or digest, small blobs read whole, layer blobs streamed
 * with resume. Each request carries the current authorization and is retried
 * once with fresh authorization after a 401 (see auth.ts).
 *
 * Every byte is checked: a manifest against the digest asked for (or, by
 * tag, the registry's Docker-Content-Digest), a small blob against its
 * digest and size. Layer blobs are streamed unverified here; their reader
 * verifies the digest and size as the bytes pass (src/image/sources/layer-tar.ts).
 *
 * May import: src/errors.ts, src/format/, this folder.
 */
import { BadInputError, NotFoundError, RegistryAuthError, RegistryError } from '../errors.js'
import { sha256Digest, type Digest } from '../format/digest.js'
import { RegistryAuth } from './auth.js'
import { findCredentials, type CredentialSources } from './credentials.js'
import { formatRegistryReference, type RegistryReference } from './reference.js'
import { describeFetchError, RegistryTransport, type TransportOptions } from './transport.js'

export interface RegistryClientOptions extends TransportOptions, CredentialSources {
  /** Resumes (Range requests) allowed per blob after a broken download (default 8). */
  maxResumes?: number
}

export interface FetchedManifest {
  /** The exact bytes served (what the digest covers). */
  bytes: Buffer
  digest: Digest
  /** Content-Type, or the document's own mediaType. */
  mediaType: string
}

/** Media types asked for: everything layerd reads, and schema 1 so that it can be named and refused. */
export const MANIFEST_ACCEPT = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.v1+prettyjws',
  'application/vnd.docker.distribution.manifest.v1+json'
].join(', ')

const MAX_MANIFEST_BYTES = 4 * 1024 * 1024
const DEFAULT_MAX_RESUMES = 8
const MANIFEST_ATTEMPTS = 3
const RESUME_BACKOFF_MS = 100

export class RegistryClient {
  readonly ref: RegistryReference
  readonly #transport: RegistryTransport
  readonly #auth: RegistryAuth
  readonly #maxResumes: number
  /** Blob downloads resumed with Range after a broken connection (tests, progress). */
  resumes = 0

  private constructor (ref: RegistryReference, transport: RegistryTransport, auth: RegistryAuth, opts: RegistryClientOptions) {
    this.ref = ref
    this.#transport = transport
    this.#auth = auth
    this.#maxResumes = opts.maxResumes ?? DEFAULT_MAX_RESUMES
  }

  /** A client for `ref`'s repository. Async (loads CAs); nothing is sent yet. */
  static async open (ref: RegistryReference, opts: RegistryClientOptions): Promise<RegistryClient> {
    const transport = await RegistryTransport.create(ref.endpoint, opts)
    const auth = new RegistryAuth(transport, ref.registry, `repository:${ref.repository}:pull`, async () => await findCredentials(ref.registry, opts))
    return new RegistryClient(ref, transport, auth, opts)
  }

  /** Tokens fetched so far. */
  get tokensFetched (): number { return this.#auth.tokensFetched }

  /**
   * The manifest (or index) `reference` (a tag or a digest) names. Async.
   * Verifies the bytes against the digest (asked for, or announced).
   * Throws NotFoundError, RegistryError, RegistryAuthError, or
   * CorruptObject-style BadInputError when the bytes do not match.
   */
  async manifest (reference: string): Promise<FetchedManifest> {
    const what = `manifest ${formatRegistryReference({ ...this.ref, tag: reference.startsWith('sha256:') ? undefined : reference, digest: reference.startsWith('sha256:') ? reference as Digest : undefined })}`
    let res: Response
    let bytes: Buffer
    for (let attempt = 1; ; attempt++) {
      res = await this.#request(`/v2/${this.ref.repository}/manifests/${reference}`, { Accept: MANIFEST_ACCEPT }, what)
      try {
        bytes = await readBody(res, MAX_MANIFEST_BYTES, what)
        break
      } catch (err) {
        // A body cut short is retried like a failed request; a too-large one is not.
        if (!(err instanceof RegistryError) || attempt >= MANIFEST_ATTEMPTS) throw err
      }
    }
    const digest = sha256Digest(bytes)
    const expected = reference.startsWith('sha256:') ? reference : res.headers.get('docker-content-digest') ?? undefined
    if (expected !== undefined && expected !== digest) {
      throw new BadInputError(`${what}: the registry served bytes with digest ${digest}, not ${expected} (corrupt or lying registry)`)
    }
    let mediaType = (res.headers.get('content-type') ?? '').split(';')[0]!.trim()
    if (mediaType === '' || mediaType === 'application/json') {
      try { mediaType = (JSON.parse(bytes.toString('utf8')) as { mediaType?: string }).mediaType ?? mediaType } catch {}
    }
    return { bytes, digest, mediaType }
  }

  /** A small blob (a config), whole, verified against `digest` and `size`. Async. */
  async blob (digest: Digest, size: number, maxBytes: number, what: string): Promise<Buffer> {
    if (size > maxBytes) throw new BadInputError(`${what} ${digest} is ${size} bytes, more than the ${maxBytes} layerd reads`)
    const parts: Uint8Array[] = []
    for await (const piece of this.blobStream(digest, size, what)) parts.push(Buffer.from(piece))
    const bytes = Buffer.concat(parts)
    const actual = sha256Digest(bytes)
    if (actual !== digest || bytes.length !== size) {
      throw new BadInputError(`${what} ${digest} from ${formatRegistryReference(this.ref)}: the registry served ${bytes.length} bytes with digest ${actual} (corrupt or lying registry)`)
    }
    return bytes
  }

  /**
   * A layer blob's bytes as they arrive. Async generator. A download that
   * breaks (connection reset, body cut short) is resumed with
   * `Range: bytes=N-` where the registry honours it (206), else restarted
   * with the bytes already passed skipped; at most `maxResumes` times.
   * Bytes are not verified here (the consumer hashes them); more bytes than
   * `size` throw BadInputError. Abandoning the iteration cancels the download.
   */
  async * blobStream (digest: Digest, size: number, what: string): AsyncGenerator<Uint8Array> {
    const label = `${what} (blob ${digest})`
    let received = 0
    for (let resumes = 0; ; resumes++) {
      const headers: Record<string, string> = received > 0 ? { Range: `bytes=${received}-` } : {}
      const res = await this.#request(`/v2/${this.ref.repository}/blobs/${digest}`, headers, label)
      let skip = 0
      if (received > 0) {
        const start = /^bytes (\d+)-/.exec(res.headers.get('content-range') ?? '')
        if (res.status === 206 && start !== null && Number(start[1]) === received) skip = 0
        else if (res.status === 200) skip = received
        else { await res.body?.cancel().catch(() => {}); throw new RegistryError(`${label}: resuming at byte ${received} got ${res.status} with Content-Range ${JSON.stringify(res.headers.get('content-range'))}`) }
      }
      let broken: unknown
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          let piece = chunk
          if (skip > 0) {
            const n = Math.min(skip, piece.length)
            skip -= n
            piece = piece.subarray(n)
            if (piece.length === 0) continue
          }
          received += piece.length
          if (received > size) throw new BadInputError(`${label}: the registry sent more than the ${size} bytes the manifest declares`)
          yield piece
        }
      } catch (err) {
        if (err instanceof BadInputError) throw err
        broken = err
      }
      if (broken === undefined && received === size) return
      if (broken === undefined && skip > 0) broken = new Error('the body ended before the resume point')
      if (resumes >= this.#maxResumes) {
        throw new RegistryError(`${label}: download broke at byte ${received} of ${size} and could not be resumed after ${resumes} resumes: ${broken === undefined ? 'the body ended early' : describeFetchError(broken)}`, { cause: broken })
      }
      this.resumes++
      await new Promise(resolve => setTimeout(resolve, RESUME_BACKOFF_MS * 2 ** Math.min(resumes, 5)))
    }
  }

  /** Close connections. Async; idempotent. */
  async close (): Promise<void> {
    await this.#transport.close()
  }

  /** GET with authorization; one retry after a 401 with new authorization. Non-2xx (except 206) become errors. */
  async #request (path: string, headers: Record<string, string>, what: string): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const authorization = await this.#auth.header()
      const res = await this.#transport.send({ url: path, headers: authorization === undefined ? headers : { ...headers, Authorization: authorization }, what })
      if (res.status === 401 && attempt === 0) {
        await res.body?.cancel().catch(() => {})
        await this.#auth.unauthorized(res.headers.get('www-authenticate'), what)
        continue
      }
      if (res.status === 401) {
        await res.body?.cancel().catch(() => {})
        throw await this.#auth.refused(what)
      }
      if (res.ok) return res
      const text = await res.text().catch(() => '')
      const detail = registryErrorDetail(text)
      if (res.status === 401 || res.status === 403) throw new RegistryAuthError(`${what}: registry ${this.ref.registry} refused access (${res.status}${detail})`)
      if (res.status === 404) throw new NotFoundError(`${what}: not found in registry ${this.ref.registry} (404${detail})`)
      throw new RegistryError(`${what}: registry ${this.ref.registry} answered ${res.status} ${res.statusText}${detail}`)
    }
  }
}

/** `: CODE message` from a distribution error body, or ''. */
function registryErrorDetail (text: string): string {
  try {
    const e = (JSON.parse(text) as { errors?: Array<{ code?: string, message?: string }> }).errors?.[0]
    return e === undefined ? '' : `: ${e.code ?? ''} ${e.message ?? ''}`.trimEnd()
  } catch { return '' }
}

async function readBody (res: Response, maxBytes: number, what: string): Promise<Buffer> {
  const declared = Number(res.headers.get('content-length'))
  if (Number.isFinite(declared) && declared > maxBytes) {
    await res.body?.cancel().catch(() => {})
    throw new BadInputError(`${what} is ${declared} bytes, more than the ${maxBytes} layerd reads`)
  }
  const parts: Uint8Array[] = []
  let n = 0
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      n += chunk.length
      if (n > maxBytes) throw new BadInputError(`${what} is more than the ${maxBytes} bytes layerd reads`)
      parts.push(chunk)
    }
  } catch (err) {
    if (err instanceof BadInputError) throw err
    throw new RegistryError(`${what}: the download broke: ${describeFetchError(err)}`, { cause: err })
  }
  return Buffer.concat(parts)
}
