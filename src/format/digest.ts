/**
 * Content digests. A digest string is always `sha256:<64 lowercase hex>`;
 * chunk ids inside a TOC are the bare hex form to keep TOCs small.
 */
import { hash } from 'node:crypto'

export type Digest = `sha256:${string}`

const DIGEST_RE = /^sha256:[0-9a-f]{64}$/
const HEX_RE = /^[0-9a-f]{64}$/

/** sha256 of `data` as a full digest string. Synchronous. */
export function sha256Digest (data: Uint8Array): Digest {
  return `sha256:${sha256Hex(data)}`
}

/** sha256 of `data` as 64 lowercase hex characters. Synchronous. (One-shot `crypto.hash`: ~10% faster than a Hash object on 16–64 KiB chunks.) */
export function sha256Hex (data: Uint8Array): string {
  return hash('sha256', data, 'hex')
}

export function isDigest (s: unknown): s is Digest {
  return typeof s === 'string' && DIGEST_RE.test(s)
}

export function isHex256 (s: unknown): s is string {
  return typeof s === 'string' && HEX_RE.test(s)
}

/** The hex part of a digest. Throws TypeError for anything that is not a sha256 digest. */
export function digestHex (d: string): string {
  if (!isDigest(d)) throw new TypeError(`not a sha256 digest: ${JSON.stringify(d).slice(0, 80)}`)
  return d.slice(7)
}

/** Short form for human output: `sha256:0123456789ab`. */
export function shortDigest (d: string): string {
  return d.startsWith('sha256:') ? d.slice(0, 19) : d.slice(0, 12)
}
