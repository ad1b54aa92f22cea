/**
 * The bubblewrap command line for one exec in a process-tier sandbox.
 *
 * - The merged overlay is bound as `/`; a fresh /proc (own pid namespace)
 *   with /proc/sys read-only (bwrap itself leaves it writable for uid 0),
 *   a minimal /dev (null, zero, full, random, urandom, tty, pts, shm), a
 *   size-capped /dev/shm; no /sys and no other host path.
 * - New pid, mount, ipc, uts, net (loopback only) and cgroup namespaces;
 *   a new session (no TIOCSTI into the caller's terminal); killed when its
 *   parent (layerd) dies.
 * - No capabilities, no_new_privs (bwrap always sets it), the seccomp
 *   program on fd 3, a cleared environment.
 * - User: root runs as host root without capabilities. Any other user runs
 *   bwrap itself as that uid/gid (through `setpriv`), so bwrap makes an
 *   unprivileged user namespace that maps only that uid and gid: the
 *   kernel checks are exact, but files owned by other ids (root's, say)
 *   show up as the overflow id 65534 inside. bubblewrap 0.8 cannot switch
 *   to a non-root uid while keeping a root-created namespace (its `--userns`
 *   path calls setuid before setgid and before its mounts).
 *
 * Pure: builds argv only.
 */
import type { ExecContext } from './exec-context.js'

export const SECCOMP_FD = 3
/** bwrap reads its options from this fd (NUL-separated), so the sandbox's /proc/1/cmdline shows no host path. */
export const ARGS_FD = 4
export const DEFAULT_DEV_SHM_BYTES = 64 * 1024 ** 2

export interface BwrapOptions {
  merged: string
  hostname: string
  devShmBytes: number
  /** bwrap installs the program on fd SECCOMP_FD (default); false when layerd-wall installs it, or none runs. */
  bwrapSeccomp?: boolean
  /** Runs first inside, with the command after it (layerd-wall and its options). */
  commandPrefix?: string[]
}

/**
 * `argv`: `setpriv … bwrap --args 4 -- CMD…` (no setpriv for root);
 * `argsFd`: the options, NUL-separated, for fd {@link ARGS_FD}. Sync.
 */
export function bwrapInvocation (ctx: ExecContext, o: BwrapOptions): { argv: string[], argsFd: Buffer } {
  const { uid, gid, additionalGids } = ctx.user
  const asUser = uid !== 0
  const prefix = asUser
    ? ['setpriv', `--reuid=${uid}`, `--regid=${gid}`, additionalGids.length > 0 ? `--groups=${additionalGids.join(',')}` : '--clear-groups', '--']
    : []
  const args = [
    '--bind', o.merged, '/',
    '--proc', '/proc',
    // bwrap covers /proc/sys read-only only when access(W_OK) succeeds, which the sysctl root dir always refuses;
    // without this, root (uid 0, even without capabilities) writes host-wide sysctls. The bind is of the host's
    // /proc/sys, whose entries resolve per the reader's namespaces (net, uts, ipc, pid), as for any process.
    '--ro-bind', '/proc/sys', '/proc/sys',
    '--dev', '/dev',
    '--perms', '1777', '--size', String(o.devShmBytes), '--tmpfs', '/dev/shm',
    '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-net', '--unshare-cgroup',
    ...(asUser ? ['--unshare-user'] : []),
    '--die-with-parent', '--new-session',
    '--cap-drop', 'ALL',
    '--hostname', o.hostname,
    '--clearenv'
  ]
  for (const kv of ctx.env) {
    const eq = kv.indexOf('=')
    args.push('--setenv', kv.slice(0, eq), kv.slice(eq + 1))
  }
  args.push('--chdir', ctx.cwd)
  if (o.bwrapSeccomp !== false) args.push('--seccomp', String(SECCOMP_FD))
  return {
    // The command stays on the command line (bwrap wants it there); the options, with the host paths, go through the fd.
    argv: [...prefix, 'bwrap', '--args', String(ARGS_FD), '--', ...(o.commandPrefix ?? []), ...ctx.argv],
    argsFd: Buffer.from(args.map(a => `${a}\0`).join(''))
  }
}
