/**
 * Registry credentials, looked up as skopeo and docker do:
 *
 * 1. `--creds USER[:PASS]` given on the command line;
 * 2. the first auth file that exists: `$REGISTRY_AUTH_FILE`, then
 *    `$DOCKER_CONFIG/config.json`, then `~/.docker/config.json`;
 *    in it, `credHelpers[registry]` (run `docker-credential-NAME get`),
 *    else `auths[registry].auth` (base64 `user:pass`) or
 *    `auths[registry].identitytoken`, else the global `credsStore` helper.
 *
 * Docker Hub's entry may be keyed `https://index.docker.io/v1/`; a key may
 * carry a scheme or a path (`https://host/v2/`), which is ignored.
 * The environment is passed in (the CLI's composition root reads it).
 *
 * May import: src/errors.ts, this folder.
 */
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { BadInputError, RegistryAuthError } from '../errors.js'
import { DOCKER_HUB } from './reference.js'

export interface RegistryCredentials {
  username: string
  password: string
  /** An OAuth2 refresh token (docker's `identitytoken`): used with the token server instead of the password. */
  identityToken?: string
  /** Where they came from, for messages (`--creds`, `/root/.docker/config.json`, `docker-credential-pass`). */
  from: string
}

export interface CredentialSources {
  /** `--creds USER[:PASS]`. */
  creds?: string
  /** The environment: REGISTRY_AUTH_FILE, DOCKER_CONFIG, HOME, PATH (for helpers). */
  env: Record<string, string | undefined>
}

const HELPER_TIMEOUT_MS = 30_000
const HUB_KEYS = ['docker.io', 'index.docker.io', 'registry-1.docker.io', 'https://index.docker.io/v1/']

/** Parse `USER[:PASS]`. Sync; BadInputError when the user is empty. */
export function parseCreds (text: string): RegistryCredentials {
  const colon = text.indexOf(':')
  const username = colon < 0 ? text : text.slice(0, colon)
  if (username === '') throw new BadInputError('invalid --creds: want USER[:PASS] with a non-empty USER')
  return { username, password: colon < 0 ? '' : text.slice(colon + 1), from: '--creds' }
}

/** The auth files to consult, in order (only the first one that exists is read). */
export function authFileCandidates (env: CredentialSources['env']): string[] {
  const files: string[] = []
  if (env.REGISTRY_AUTH_FILE !== undefined && env.REGISTRY_AUTH_FILE !== '') files.push(env.REGISTRY_AUTH_FILE)
  if (env.DOCKER_CONFIG !== undefined && env.DOCKER_CONFIG !== '') files.push(join(env.DOCKER_CONFIG, 'config.json'))
  if (env.HOME !== undefined && env.HOME !== '') files.push(join(env.HOME, '.docker', 'config.json'))
  return files
}

/**
 * Credentials for `registry` (as in a reference: `docker.io`, `host:port`),
 * or undefined when none are configured. Async. Throws BadInputError for an
 * auth file that is not valid JSON, RegistryAuthError when a credential
 * helper fails.
 */
export async function findCredentials (registry: string, sources: CredentialSources): Promise<RegistryCredentials | undefined> {
  if (sources.creds !== undefined) return parseCreds(sources.creds)
  for (const file of authFileCandidates(sources.env)) {
    let text: string
    try { text = await readFile(file, 'utf8') } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') continue
      throw new BadInputError(`cannot read auth file ${file}: ${(err as Error).message}`, { cause: err })
    }
    return await fromAuthFile(registry, file, text, sources.env)
  }
  return undefined
}

interface AuthFile {
  auths?: Record<string, { auth?: string, identitytoken?: string, username?: string, password?: string }>
  credHelpers?: Record<string, string>
  credsStore?: string
}

async function fromAuthFile (registry: string, file: string, text: string, env: CredentialSources['env']): Promise<RegistryCredentials | undefined> {
  let doc: AuthFile
  try { doc = JSON.parse(text) as AuthFile } catch (err) {
    throw new BadInputError(`auth file ${file} is not valid JSON: ${(err as Error).message}`, { cause: err })
  }
  if (doc === null || typeof doc !== 'object') throw new BadInputError(`auth file ${file} is not a JSON object`)
  const keys = registry === DOCKER_HUB ? HUB_KEYS : [registry]
  const helper = keys.map(k => doc.credHelpers?.[k]).find(h => typeof h === 'string')
  if (helper !== undefined) return await runHelper(helper, registry, env)
  for (const [key, entry] of Object.entries(doc.auths ?? {})) {
    if (!keys.includes(normalizeAuthKey(key)) && !keys.includes(key)) continue
    if (entry === null || typeof entry !== 'object') continue
    const creds = decodeAuthEntry(entry, `${file} (auths ${JSON.stringify(key)})`)
    if (creds !== undefined) return creds
  }
  if (typeof doc.credsStore === 'string' && doc.credsStore !== '') return await runHelper(doc.credsStore, registry, env)
  return undefined
}

/** `https://host:5000/v2/` → `host:5000`. */
function normalizeAuthKey (key: string): string {
  return key.replace(/^[a-z]+:\/\//i, '').replace(/\/.*$/, '')
}

function decodeAuthEntry (entry: NonNullable<AuthFile['auths']>[string], from: string): RegistryCredentials | undefined {
  let username = entry.username ?? ''
  let password = entry.password ?? ''
  if (typeof entry.auth === 'string' && entry.auth !== '') {
    const plain = Buffer.from(entry.auth, 'base64').toString('utf8')
    const colon = plain.indexOf(':')
    if (colon <= 0) throw new BadInputError(`${from}: "auth" is not base64 of USER:PASS`)
    username = plain.slice(0, colon)
    password = plain.slice(colon + 1)
  }
  const creds: RegistryCredentials = { username, password, from }
  if (typeof entry.identitytoken === 'string' && entry.identitytoken !== '') creds.identityToken = entry.identitytoken
  return username === '' && creds.identityToken === undefined ? undefined : creds
}

/** Run `docker-credential-NAME get` with the registry on stdin (the docker credential-helper protocol). */
async function runHelper (name: string, registry: string, env: CredentialSources['env']): Promise<RegistryCredentials | undefined> {
  if (!/^[\w.-]+$/.test(name)) throw new BadInputError(`credential helper name ${JSON.stringify(name)} is not valid`)
  const program = `docker-credential-${name}`
  const server = registry === DOCKER_HUB ? 'https://index.docker.io/v1/' : registry
  const { code, stdout, stderr } = await new Promise<{ code: number | null, stdout: string, stderr: string }>((resolve, reject) => {
    const child = spawn(program, ['get'], { env: env as NodeJS.ProcessEnv, stdio: ['pipe', 'pipe', 'pipe'], timeout: HELPER_TIMEOUT_MS })
    let out = ''
    let err = ''
    child.stdout.setEncoding('utf8').on('data', (s: string) => { out += s })
    child.stderr.setEncoding('utf8').on('data', (s: string) => { err += s })
    child.on('error', e => reject(new RegistryAuthError(`cannot run credential helper ${program} for ${registry}: ${e.message}`, { cause: e })))
    child.on('close', c => resolve({ code: c, stdout: out, stderr: err }))
    // A helper that exits without reading its stdin makes this write fail with EPIPE: its exit code
    // and stderr (reported below) say what went wrong, so the write error itself is dropped.
    child.stdin.on('error', () => {})
    child.stdin.end(server)
  })
  if (code !== 0) {
    // The protocol's "not found" answer: no credentials for this server.
    if (/credentials not found/i.test(stdout + stderr)) return undefined
    throw new RegistryAuthError(`credential helper ${program} failed for ${registry} (exit ${code}): ${(stderr || stdout).trim().split('\n')[0] ?? ''}`)
  }
  let doc: { Username?: unknown, Secret?: unknown }
  try { doc = JSON.parse(stdout) as typeof doc } catch (err) {
    throw new RegistryAuthError(`credential helper ${program} printed something that is not JSON for ${registry}`, { cause: err })
  }
  if (typeof doc.Secret !== 'string') throw new RegistryAuthError(`credential helper ${program} gave no Secret for ${registry}`)
  const username = typeof doc.Username === 'string' ? doc.Username : ''
  // docker: the username "<token>" means the secret is an identity token.
  if (username === '<token>') return { username: '', password: '', identityToken: doc.Secret, from: program }
  return { username, password: doc.Secret, from: program }
}
