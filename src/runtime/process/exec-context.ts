/**
 * What one command in a sandbox runs as, derived the same way for every
 * tier from the image config (https://github.com/opencontainers/image-spec
 * config.md) and the exec options:
 *
 * - argv: the exec's `cmd` as given (like `docker exec`); when empty, the
 *   image's Entrypoint + Cmd (like `docker run` without arguments);
 * - env: the image's Env, then the exec's `env` (same key: the exec wins);
 *   PATH defaults to docker's, HOME to the user's home from /etc/passwd;
 * - cwd: the exec's `cwd`, else WorkingDir, else `/`;
 * - user: the exec's `user`, else User, else root. `name`, `uid`,
 *   `name:group`, `uid:gid` (docker's forms), names looked up in the
 *   image's /etc/passwd and /etc/group (read inside the image root, never
 *   following links out of it); supplementary groups from /etc/group.
 *
 * May import: src/errors.ts, src/format/manifest.ts, the modules next to it.
 */
import { UsageError } from '../../errors.js'
import type { OciImageConfig } from '../../format/manifest.js'
import type { ExecOptions } from '../sandbox.js'
import { readFileInRoot } from './rooted-path.js'

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
const MAX_ACCOUNT_FILE_BYTES = 4 * 1024 ** 2
const MAX_ID = 2 ** 32 - 2

export interface ExecUser { uid: number, gid: number, additionalGids: number[], home: string }

export interface ExecContext {
  argv: string[]
  /** KEY=VALUE, each key once, in first-seen order. */
  env: string[]
  cwd: string
  user: ExecUser
}

interface PasswdEntry { name: string, uid: number, gid: number, home: string }
interface GroupEntry { name: string, gid: number, members: string[] }

function parseId (s: string): number | undefined {
  if (!/^[0-9]{1,10}$/.test(s)) return undefined
  const n = Number(s)
  return n <= MAX_ID ? n : undefined
}

function parsePasswd (text: string): PasswdEntry[] {
  return text.split('\n').flatMap(line => {
    const f = line.split(':')
    const uid = parseId(f[2] ?? ''); const gid = parseId(f[3] ?? '')
    return f.length >= 7 && uid !== undefined && gid !== undefined ? [{ name: f[0]!, uid, gid, home: f[5]! }] : []
  })
}

function parseGroup (text: string): GroupEntry[] {
  return text.split('\n').flatMap(line => {
    const f = line.split(':')
    const gid = parseId(f[2] ?? '')
    return f.length >= 4 && gid !== undefined ? [{ name: f[0]!, gid, members: f[3]!.split(',').filter(m => m !== '') }] : []
  })
}

/**
 * Resolve a docker-style user spec against the image rooted at `root`.
 * Async. Throws UsageError naming the spec when a name is unknown.
 */
export async function resolveImageUser (root: string, spec: string | undefined): Promise<ExecUser> {
  const s = (spec ?? '').trim()
  const passwd = parsePasswd(await readFileInRoot(root, '/etc/passwd', MAX_ACCOUNT_FILE_BYTES) ?? '')
  const [userPart, groupPart] = s === '' ? ['0', undefined] : s.split(':', 2) as [string, string | undefined]
  const byName = passwd.find(p => p.name === userPart)
  const numericUid = parseId(userPart)
  const entry = byName ?? (numericUid !== undefined ? passwd.find(p => p.uid === numericUid) : undefined)
  if (entry === undefined && numericUid === undefined) throw new UsageError(`user ${JSON.stringify(s)}: no such user in the image's /etc/passwd`)
  const uid = entry?.uid ?? numericUid!
  const name = entry?.name
  const groups = parseGroup(await readFileInRoot(root, '/etc/group', MAX_ACCOUNT_FILE_BYTES) ?? '')
  let gid = entry?.gid ?? 0
  if (groupPart !== undefined && groupPart !== '') {
    const g = groups.find(x => x.name === groupPart)
    const numericGid = parseId(groupPart)
    if (g === undefined && numericGid === undefined) throw new UsageError(`user ${JSON.stringify(s)}: no such group in the image's /etc/group`)
    gid = g?.gid ?? numericGid!
  }
  // Supplementary groups only when the user was named (docker does the same) and no group was forced.
  const additionalGids = name !== undefined && groupPart === undefined
    ? [...new Set(groups.filter(g => g.members.includes(name) && g.gid !== gid).map(g => g.gid))]
    : []
  return { uid, gid, additionalGids, home: entry?.home ?? '/' }
}

/** Merge KEY=VALUE lists; later lists win per key, order of first appearance kept. */
export function mergeEnv (...lists: Array<readonly string[] | undefined>): string[] {
  const map = new Map<string, string>()
  for (const list of lists) {
    for (const kv of list ?? []) {
      const eq = kv.indexOf('=')
      if (eq <= 0) throw new UsageError(`environment entry ${JSON.stringify(kv)} is not KEY=VALUE`)
      map.set(kv.slice(0, eq), kv.slice(eq + 1))
    }
  }
  return [...map].map(([k, v]) => `${k}=${v}`)
}

/**
 * The argv, env, cwd and user of one exec. `root` is the image root used
 * for user lookup (the immutable lower). Async. Throws UsageError when
 * there is nothing to run, the cwd is relative, or the user is unknown.
 */
export async function resolveExecContext (root: string, config: OciImageConfig, opts: ExecOptions): Promise<ExecContext> {
  const c = config.config ?? {}
  const argv = opts.cmd.length > 0 ? [...opts.cmd] : [...(c.Entrypoint ?? []), ...(c.Cmd ?? [])]
  if (argv.length === 0) throw new UsageError('nothing to run: no command given and the image has no Entrypoint or Cmd')
  const cwd = opts.cwd ?? (c.WorkingDir !== undefined && c.WorkingDir !== '' ? c.WorkingDir : '/')
  if (!cwd.startsWith('/')) throw new UsageError(`working directory ${JSON.stringify(cwd)} is not absolute`)
  const user = await resolveImageUser(root, opts.user ?? c.User)
  const env = mergeEnv([`PATH=${DEFAULT_PATH}`, `HOME=${user.home}`], c.Env, opts.env)
  return { argv, env, cwd, user }
}
