/**
 * Registry authentication: answers a `WWW-Authenticate` challenge.
 *
 * - `Basic`: the credentials, base64, on every request.
 * - `Bearer realm=…,service=…,scope=…`: a token from the realm (the docker
 *   token protocol: GET with `service` and `scope`, basic credentials when
 *   there are any; with an identity token, a POST of grant_type
 *   refresh_token, through the transport so that its CAs, client
 *   certificate and --tls-verify apply). The token is kept with its expiry (`expires_in`,
 *   default 60 s per the spec) and renewed shortly before it, and on any
 *   later 401 (a token the registry stopped accepting early).
 *
 * One RegistryAuth per registry and repository scope (`repository:NAME:pull`).
 *
 * May import: src/errors.ts, this folder.
 */
import { RegistryAuthError } from '../errors.js'
import type { RegistryCredentials } from './credentials.js'
import type { RegistryTransport } from './transport.js'

export interface Challenge {
  scheme: string
  params: Record<string, string>
}

/** Renew this long before a token's stated expiry. */
const RENEW_MARGIN_MS = 5_000
const DEFAULT_TOKEN_SECONDS = 60
const MAX_TOKEN_RESPONSE_BYTES = 1024 * 1024

/** Parse a WWW-Authenticate header (one challenge; quoted and bare values). Sync; undefined when unreadable. */
export function parseChallenge (header: string | null): Challenge | undefined {
  if (header === null) return undefined
  const m = /^\s*([A-Za-z][\w-]*)\s*(.*)$/.exec(header)
  if (m === null) return undefined
  const params: Record<string, string> = {}
  const re = /([\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?\s*/g
  for (let p = re.exec(m[2]!); p !== null; p = re.exec(m[2]!)) {
    params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, '$1') : p[3]!
  }
  return { scheme: m[1]!.toLowerCase(), params }
}

interface Token { value: string, expiresAtMs: number }

export class RegistryAuth {
  readonly #transport: RegistryTransport
  readonly #registry: string
  readonly #scope: string
  readonly #credentials: () => Promise<RegistryCredentials | undefined>
  readonly #now: () => number
  #challenge: Challenge | undefined
  #token: Token | undefined
  #renewing: Promise<Token> | undefined
  /** Tokens fetched so far (for tests and messages). */
  tokensFetched = 0

  /**
   * `credentials` is called at most once, when a challenge first needs them.
   * `now` is the clock (ms), replaceable in tests.
   */
  constructor (transport: RegistryTransport, registry: string, scope: string, credentials: () => Promise<RegistryCredentials | undefined>, now: () => number = Date.now) {
    this.#transport = transport
    this.#registry = registry
    this.#scope = scope
    let creds: Promise<RegistryCredentials | undefined> | undefined
    this.#credentials = async () => await (creds ??= credentials())
    this.#now = now
  }

  /** The Authorization header to send now, renewing an expiring token first; undefined before any challenge. Async. */
  async header (): Promise<string | undefined> {
    const c = this.#challenge
    if (c === undefined) return undefined
    if (c.scheme === 'basic') return await this.#basicHeader()
    if (this.#token === undefined || this.#now() >= this.#token.expiresAtMs - RENEW_MARGIN_MS) await this.#renew()
    return `Bearer ${this.#token!.value}`
  }

  /**
   * A request was answered 401 with this challenge: prepare to retry it
   * (a new token, or basic credentials). Async. Throws RegistryAuthError when
   * the challenge cannot be met (no credentials for Basic, an unknown
   * scheme, a token server that refuses).
   */
  async unauthorized (header: string | null, what: string): Promise<void> {
    const c = parseChallenge(header)
    if (c === undefined) throw new RegistryAuthError(`${what}: registry ${this.#registry} answered 401 without a usable WWW-Authenticate challenge`)
    if (c.scheme !== 'basic' && c.scheme !== 'bearer') throw new RegistryAuthError(`${what}: registry ${this.#registry} asks for ${c.scheme} authentication, which layerd does not speak (Basic, Bearer)`)
    const previous = this.#challenge
    this.#challenge = c
    if (c.scheme === 'basic') {
      if (previous?.scheme === 'basic') throw await this.refused(what)
      await this.#basicHeader()
      return
    }
    if (c.params.realm === undefined) throw new RegistryAuthError(`${what}: registry ${this.#registry} sent a Bearer challenge without a realm`)
    if (c.params.error === 'insufficient_scope' && this.#token !== undefined && previous?.scheme === 'bearer') throw await this.refused(what)
    this.#token = undefined
    await this.#renew()
  }

  /** The error for a request still refused (401) after its challenge was answered. Async. */
  async refused (what: string): Promise<RegistryAuthError> {
    const creds = await this.#credentials()
    return new RegistryAuthError(creds === undefined
      ? `${what}: registry ${this.#registry} requires authentication; give --creds USER:PASS or log in (auth file, credential helper)`
      : `${what}: registry ${this.#registry} refused the credentials of ${creds.username || 'the identity token'} (from ${creds.from})`)
  }

  async #basicHeader (): Promise<string> {
    const creds = await this.#credentials()
    if (creds === undefined || creds.username === '') {
      throw new RegistryAuthError(`registry ${this.#registry} requires authentication (Basic); give --creds USER:PASS or log in (auth file, credential helper)`)
    }
    return `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`
  }

  async #renew (): Promise<void> {
    this.#renewing ??= this.#fetchToken().finally(() => { this.#renewing = undefined })
    this.#token = await this.#renewing
  }

  async #fetchToken (): Promise<Token> {
    const c = this.#challenge!
    const realm = c.params.realm!
    const url = new URL(realm)
    if (c.params.service !== undefined) url.searchParams.set('service', c.params.service)
    const scope = c.params.scope ?? this.#scope
    url.searchParams.set('scope', scope)
    const creds = await this.#credentials()
    const headers: Record<string, string> = {}
    if (creds !== undefined && creds.username !== '' && creds.identityToken === undefined) {
      headers.Authorization = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`
    }
    const what = `token for ${scope} from ${url.origin}${url.pathname}`
    let res: Response
    if (creds?.identityToken !== undefined) {
      // OAuth2 refresh-token grant (docker's identity tokens); one attempt, a POST carries a body.
      // Through the transport, so the token server sees the same CAs, client certificate and --tls-verify as the registry.
      const body = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: creds.identityToken, service: c.params.service ?? '', scope, client_id: 'layerd' }).toString()
      res = await this.#transport.send({ method: 'POST', url: url.origin + url.pathname, body, headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, what })
    } else {
      res = await this.#transport.send({ url: url.toString(), headers, what })
    }
    const text = await readLimited(res, MAX_TOKEN_RESPONSE_BYTES)
    if (res.status === 401 || res.status === 403) {
      throw new RegistryAuthError(creds === undefined
        ? `${what}: refused (${res.status}); give --creds USER:PASS or log in`
        : `${what}: refused the credentials of ${creds.username || 'the identity token'} (from ${creds.from}) (${res.status})`)
    }
    if (!res.ok) throw new RegistryAuthError(`${what}: token server answered ${res.status} ${res.statusText}`)
    let doc: { token?: unknown, access_token?: unknown, expires_in?: unknown, issued_at?: unknown }
    try { doc = JSON.parse(text) as typeof doc } catch (err) {
      throw new RegistryAuthError(`${what}: the token server's answer is not JSON`, { cause: err })
    }
    const value = typeof doc.token === 'string' && doc.token !== '' ? doc.token : doc.access_token
    if (typeof value !== 'string' || value === '') throw new RegistryAuthError(`${what}: the token server's answer has no token`)
    const seconds = typeof doc.expires_in === 'number' && doc.expires_in > 0 ? doc.expires_in : DEFAULT_TOKEN_SECONDS
    const issued = typeof doc.issued_at === 'string' ? Date.parse(doc.issued_at) : NaN
    // Our clock, not the server's, unless the server's issue time is close to ours (clock skew).
    const from = Number.isFinite(issued) && Math.abs(issued - this.#now()) < 60_000 ? Math.min(issued, this.#now()) : this.#now()
    this.tokensFetched++
    return { value, expiresAtMs: from + seconds * 1000 }
  }
}

async function readLimited (res: Response, maxBytes: number): Promise<string> {
  const len = Number(res.headers.get('content-length'))
  if (Number.isFinite(len) && len > maxBytes) { await res.body?.cancel(); return '' }
  const buf = Buffer.from(await res.arrayBuffer())
  return buf.subarray(0, maxBytes).toString('utf8')
}
