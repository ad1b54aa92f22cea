/**
 * AWS Signature Version 4 for S3 requests without a body (GET), as plain
 * functions over strings: the canonical request, the string to sign and the
 * `Authorization` header. What S3HttpReader signs its range GETs with, so a
 * read needs no SDK.
 *
 * The signing key (four HMACs over the secret, the date, the region and the
 * service) changes once a day; `SigV4Signer` keeps the last one, so a request
 * costs two sha256 and one HMAC over a few hundred bytes.
 *
 * Pure apart from node:crypto. May import: node:crypto.
 */
import { createHash, createHmac } from 'node:crypto'

export interface SigV4Credentials { accessKeyId: string, secretAccessKey: string, sessionToken?: string }

/** What S3 accepts as x-amz-content-sha256 when the payload is not hashed (a GET has none). */
export const UNSIGNED_PAYLOAD = 'UNSIGNED-PAYLOAD'

/** `20130524T000000Z` for `date`. */
export function amzDate (date: Date): string {
  return date.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '')
}

/**
 * A path encoded as SigV4 wants it for S3: every byte but the unreserved
 * characters (A-Z a-z 0-9 - . _ ~) and '/' percent-encoded, once.
 */
export function encodeS3Path (path: string): string {
  return path.split('/').map(segment => encodeURIComponent(segment).replace(/[!'()*]/g, c => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)).join('/')
}

export interface SignedRequest {
  method: 'GET' | 'HEAD'
  /** Already encoded (encodeS3Path), starting with '/'. */
  path: string
  /** Header names lower case; `host` must be present. All of them are signed. */
  headers: Record<string, string>
}

export class SigV4Signer {
  readonly #credentials: SigV4Credentials
  readonly #region: string
  readonly #service: string
  #keyDay = ''
  #key: Buffer = Buffer.alloc(0)

  constructor (credentials: SigV4Credentials, region: string, service = 's3') {
    this.#credentials = credentials
    this.#region = region
    this.#service = service
  }

  /**
   * The headers to send for `req` at `now`: `req.headers` plus x-amz-date,
   * x-amz-content-sha256 (when missing: UNSIGNED-PAYLOAD), the session token
   * if any, and Authorization. Sync.
   */
  sign (req: SignedRequest, now = new Date()): Record<string, string> {
    const stamp = amzDate(now)
    const day = stamp.slice(0, 8)
    const headers: Record<string, string> = { ...req.headers, 'x-amz-date': stamp }
    headers['x-amz-content-sha256'] ??= UNSIGNED_PAYLOAD
    if (this.#credentials.sessionToken !== undefined) headers['x-amz-security-token'] = this.#credentials.sessionToken
    const names = Object.keys(headers).map(n => n.toLowerCase()).sort()
    const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]))
    const canonicalHeaders = names.map(n => `${n}:${lower[n]!.trim().replace(/\s+/g, ' ')}\n`).join('')
    const signedHeaders = names.join(';')
    const canonical = [req.method, req.path, '', canonicalHeaders, signedHeaders, lower['x-amz-content-sha256']].join('\n')
    const scope = `${day}/${this.#region}/${this.#service}/aws4_request`
    const toSign = ['AWS4-HMAC-SHA256', stamp, scope, createHash('sha256').update(canonical).digest('hex')].join('\n')
    const signature = createHmac('sha256', this.#signingKey(day)).update(toSign).digest('hex')
    headers.authorization = `AWS4-HMAC-SHA256 Credential=${this.#credentials.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`
    return headers
  }

  #signingKey (day: string): Buffer {
    if (day !== this.#keyDay) {
      const hmac = (key: string | Buffer, data: string): Buffer => createHmac('sha256', key).update(data).digest()
      this.#key = hmac(hmac(hmac(hmac(`AWS4${this.#credentials.secretAccessKey}`, day), this.#region), this.#service), 'aws4_request')
      this.#keyDay = day
    }
    return this.#key
  }
}
