/**
 * RegistryTransport: HTTP to one registry endpoint, on Node's fetch.
 *
 * - TLS: the system CAs (`/etc/ssl/certs/ca-certificates.crt` and Node's
 *   bundle), plus `--cert-dir DIR` as containers-certs.d lays it out: every
 *   `*.crt` is a CA, a `NAME.cert` + `NAME.key` pair is a client certificate.
 * - `tlsVerify: false` (skopeo's `--tls-verify=false`): certificates are not
 *   verified, and an endpoint that does not speak TLS is used over plain
 *   HTTP (tried once, at the first request, as containers/image does).
 * - Redirects are followed by hand (at most 5): `Authorization` is dropped
 *   when one leads to another host (blob storage behind a redirect must not
 *   see registry credentials).
 * - Retries with exponential backoff (and `Retry-After`) on 5xx, 429 and
 *   failed connections, for requests that carry no body.
 *
 * One attempt per call of `#attempt`; retries live only in `send`.
 *
 * May import: src/errors.ts.
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { rootCertificates } from 'node:tls'
import { Agent, type Dispatcher } from 'undici'
import { BadInputError, RegistryError } from '../errors.js'

export interface TransportOptions {
  /** Verify TLS certificates and require TLS (default true). */
  tlsVerify?: boolean
  /** containers-certs.d style directory: `*.crt` CAs, `NAME.cert`/`NAME.key` client certificate. */
  certDir?: string
  /** Retries after the first attempt (default 4). */
  retries?: number
  /** First backoff in ms, doubled per retry (default 200). */
  retryBaseMs?: number
  /** Connect + response-header timeout in ms (default 30 s). */
  timeoutMs?: number
}

export interface TransportRequest {
  /** POST (the token server's refresh-token grant) is sent once: never retried, no redirect followed. */
  method?: 'GET' | 'HEAD' | 'POST'
  /** The request body (POST only). */
  body?: string
  /** Absolute URL, or a path (`/v2/…`) on this endpoint. */
  url: string
  headers?: Record<string, string>
  /** Names the object for messages, e.g. `manifest docker://host/repo:tag`. */
  what: string
}

const SYSTEM_CA_FILE = '/etc/ssl/certs/ca-certificates.crt'
const MAX_REDIRECTS = 5
const MAX_RETRY_AFTER_MS = 10_000
const DEFAULT_RETRIES = 4
const DEFAULT_RETRY_BASE_MS = 200
const DEFAULT_TIMEOUT_MS = 30_000

export class RegistryTransport {
  /** host[:port]. */
  readonly endpoint: string
  readonly #dispatcher: Dispatcher
  readonly #opts: Required<Pick<TransportOptions, 'tlsVerify' | 'retries' | 'retryBaseMs'>>
  #scheme: Promise<'https' | 'http'> | undefined

  private constructor (endpoint: string, dispatcher: Dispatcher, opts: TransportOptions) {
    this.endpoint = endpoint
    this.#dispatcher = dispatcher
    this.#opts = { tlsVerify: opts.tlsVerify ?? true, retries: opts.retries ?? DEFAULT_RETRIES, retryBaseMs: opts.retryBaseMs ?? DEFAULT_RETRY_BASE_MS }
  }

  /** A transport for `endpoint` (host[:port]). Async (reads CA files). BadInputError for an unreadable --cert-dir. */
  static async create (endpoint: string, opts: TransportOptions = {}): Promise<RegistryTransport> {
    const tls = await loadTls(opts)
    const timeout = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS
    const dispatcher = new Agent({
      connect: { ...tls, rejectUnauthorized: opts.tlsVerify ?? true, timeout },
      headersTimeout: timeout,
      bodyTimeout: timeout,
      connections: 16
    })
    return new RegistryTransport(endpoint, dispatcher, opts)
  }

  /** `https://endpoint` or, when TLS is not verified and the endpoint does not speak it, `http://endpoint`. Async. */
  async baseUrl (): Promise<string> {
    this.#scheme ??= this.#probeScheme()
    return `${await this.#scheme}://${this.endpoint}`
  }

  /**
   * One request, with redirects and retries. Async. Resolves with the final
   * response whatever its status (the body unread, the caller consumes or
   * cancels it), except that 5xx and 429 are retried and then thrown as
   * RegistryError, as are connection failures.
   */
  async send (req: TransportRequest): Promise<Response> {
    const url = req.url.startsWith('/') ? `${await this.baseUrl()}${req.url}` : req.url
    let lastError: unknown
    const retries = req.method === 'POST' ? 0 : this.#opts.retries
    for (let attempt = 0; ; attempt++) {
      let delayMs = this.#opts.retryBaseMs * 2 ** attempt
      try {
        const res = await this.#followRedirects(url, req)
        if (res.status < 500 && res.status !== 429) return res
        await res.body?.cancel().catch(() => {})
        lastError = new RegistryError(`${req.what}: registry ${this.endpoint} answered ${res.status} ${res.statusText}`)
        const retryAfter = Number(res.headers.get('retry-after'))
        if (Number.isFinite(retryAfter) && retryAfter > 0) delayMs = Math.min(retryAfter * 1000, MAX_RETRY_AFTER_MS)
      } catch (err) {
        if (err instanceof RegistryError) throw err
        lastError = new RegistryError(`${req.what}: cannot reach registry ${this.endpoint}: ${describeFetchError(err)}`, { cause: err })
      }
      if (attempt >= retries) throw new RegistryError(`${(lastError as Error).message} (after ${attempt + 1} attempts)`, { cause: lastError })
      await sleep(delayMs)
    }
  }

  /** Close idle connections. Async; idempotent. */
  async close (): Promise<void> {
    await this.#dispatcher.close().catch(() => {})
  }

  async #followRedirects (startUrl: string, req: TransportRequest): Promise<Response> {
    let url = new URL(startUrl)
    const origin = url.host
    let headers = { ...req.headers }
    for (let hop = 0; ; hop++) {
      const res = await fetch(url, { method: req.method ?? 'GET', headers, body: req.body, redirect: 'manual', dispatcher: this.#dispatcher } as RequestInit)
      if (![301, 302, 303, 307, 308].includes(res.status) || req.method === 'POST') return res
      const location = res.headers.get('location')
      await res.body?.cancel().catch(() => {})
      if (location === null) throw new RegistryError(`${req.what}: registry ${this.endpoint} redirected (${res.status}) without a Location`)
      if (hop >= MAX_REDIRECTS) throw new RegistryError(`${req.what}: more than ${MAX_REDIRECTS} redirects from registry ${this.endpoint}`)
      url = new URL(location, url)
      if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new RegistryError(`${req.what}: registry ${this.endpoint} redirected to ${url.protocol} URL`)
      if (url.host !== origin) {
        // Never send the registry's credentials to another host (object storage behind a redirect).
        const { Authorization: _a, authorization: _b, ...rest } = headers
        headers = rest
      }
    }
  }

  async #probeScheme (): Promise<'https' | 'http'> {
    if (this.#opts.tlsVerify) return 'https'
    try {
      const res = await fetch(`https://${this.endpoint}/v2/`, { redirect: 'manual', dispatcher: this.#dispatcher } as RequestInit)
      await res.body?.cancel().catch(() => {})
      return 'https'
    } catch (err) {
      // Only a TLS-level failure means "this endpoint speaks plain HTTP"; a refused connection stays an error.
      const code = (err as { cause?: { code?: string } }).cause?.code ?? ''
      if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'https'
      return 'http'
    }
  }
}

/** The TLS options from the system CA bundle and a cert dir. */
async function loadTls (opts: TransportOptions): Promise<{ ca: string[], cert?: string, key?: string }> {
  const ca = [...rootCertificates]
  const system = await readFile(SYSTEM_CA_FILE, 'utf8').catch(() => undefined)
  if (system !== undefined) ca.push(system)
  if (opts.certDir === undefined) return { ca }
  let names: string[]
  try { names = (await readdir(opts.certDir)).sort() } catch (err) {
    throw new BadInputError(`cannot read --cert-dir ${opts.certDir}: ${(err as Error).message}`, { cause: err })
  }
  const result: { ca: string[], cert?: string, key?: string } = { ca }
  for (const name of names) {
    const path = join(opts.certDir, name)
    if (name.endsWith('.crt')) ca.push(await readFile(path, 'utf8'))
    else if (name.endsWith('.cert')) {
      const keyName = `${name.slice(0, -'.cert'.length)}.key`
      if (!names.includes(keyName)) throw new BadInputError(`--cert-dir ${opts.certDir}: client certificate ${name} has no ${keyName}`)
      result.cert = await readFile(path, 'utf8')
      result.key = await readFile(join(opts.certDir, keyName), 'utf8')
    }
  }
  return result
}

/** A connection failure in one phrase: the cause's code and message when fetch wraps one. */
export function describeFetchError (err: unknown): string {
  const cause = (err as { cause?: { code?: string, message?: string } }).cause
  if (cause?.message !== undefined) return cause.code !== undefined && !cause.message.includes(cause.code) ? `${cause.code} ${cause.message}` : cause.message
  return (err as Error).message ?? String(err)
}

async function sleep (ms: number): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms))
}
