/**
 * Who may call the API. The control plane takes an API key in `X-API-Key`:
 * the keys are LAYERD_API_KEYS (comma-separated) when set, else the lines of
 * `<home>/api-keys` (mode 0600 is the operator's job; `#` starts a comment).
 * With no key configured every call is refused, so a node never serves
 * unauthenticated by accident. Each sandbox's envd calls take that sandbox's
 * own access token in `X-Access-Token` (returned at create), so a token
 * opens one sandbox and no other.
 *
 * Comparisons are of SHA-256 digests with timingSafeEqual: the time taken
 * says nothing about how much of a key matched.
 *
 * May import: node built-ins.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

export const API_KEYS_FILE = 'api-keys'

const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest()

/** The keys this node accepts, from the environment or the home's keys file. Sync; a missing file means none. */
export function loadApiKeys (home: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const fromEnv = env.LAYERD_API_KEYS
  let lines: string[]
  if (fromEnv !== undefined && fromEnv.trim() !== '') lines = fromEnv.split(',')
  else {
    try { lines = readFileSync(join(home, API_KEYS_FILE), 'utf8').split('\n') } catch { lines = [] }
  }
  return lines.map(l => l.replace(/#.*/, '').trim()).filter(l => l !== '')
}

export class ApiKeys {
  readonly #digests: Buffer[]

  constructor (keys: readonly string[]) {
    this.#digests = keys.map(digest)
  }

  get configured (): boolean { return this.#digests.length > 0 }

  /** Whether `presented` (a header's value) is one of the keys. Sync. */
  accepts (presented: string | string[] | undefined): boolean {
    if (typeof presented !== 'string' || presented === '') return false
    const d = digest(presented)
    let ok = false
    for (const k of this.#digests) ok = timingSafeEqual(k, d) || ok
    return ok
  }
}

/** A fresh per-sandbox access token. */
export function newAccessToken (): string {
  return randomBytes(24).toString('base64url')
}

/** Whether `presented` is `token`. Sync. */
export function tokenMatches (token: string, presented: string | string[] | undefined): boolean {
  if (typeof presented !== 'string') return false
  return timingSafeEqual(digest(token), digest(presented))
}
