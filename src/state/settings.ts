/**
 * Where things are, from flags and environment, resolved once:
 * `--home DIR` / LAYERD_HOME (node-local state), `--store URL` /
 * LAYERD_STORE (default: the embedded file store under home), and
 * `--s3-endpoint URL` / LAYERD_S3_ENDPOINT.
 */
import { homedir } from 'node:os'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

export interface Settings {
  home: string
  store: string
  s3Endpoint?: string
}

export interface SettingFlags { home?: string, store?: string, 's3-endpoint'?: string }

/** Default home: /var/lib/layerd for root (the daemon's user), ~/.layerd otherwise. */
export function defaultHome (): string {
  return process.getuid?.() === 0 ? '/var/lib/layerd' : join(homedir(), '.layerd')
}

export function resolveSettings (flags: SettingFlags, env: NodeJS.ProcessEnv = process.env): Settings {
  const home = resolve(flags.home ?? env.LAYERD_HOME ?? defaultHome())
  const store = flags.store ?? env.LAYERD_STORE ?? pathToFileURL(join(home, 'store')).href
  const s3Endpoint = flags['s3-endpoint'] ?? env.LAYERD_S3_ENDPOINT
  return { home, store, ...(s3Endpoint === undefined || s3Endpoint === '' ? {} : { s3Endpoint }) }
}
