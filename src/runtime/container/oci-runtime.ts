/**
 * Command lines for the OCI runtimes the container tier drives: runc
 * (default) and crun. crun refuses this host's hybrid cgroup layout, so it
 * runs in a private mount namespace with the cgroup2 mount removed
 * (PLATFORM.md): `unshare -m sh -c 'umount /sys/fs/cgroup/unified; exec crun …'`.
 * Each runtime keeps its container state under its own `--root`.
 *
 * May import: node built-ins.
 */
import { join } from 'node:path'

export type OciRuntimeName = 'runc' | 'crun'

export const DEFAULT_RUNTIME_STATE_ROOT = '/run/layerd'
const CGROUP2_HYBRID_MOUNT = '/sys/fs/cgroup/unified'

export class OciRuntime {
  readonly name: OciRuntimeName
  /** Where the runtime keeps its container state (`--root`). */
  readonly stateRoot: string

  constructor (name: OciRuntimeName, stateRoot = join(DEFAULT_RUNTIME_STATE_ROOT, name)) {
    this.name = name
    this.stateRoot = stateRoot
  }

  /** Programs that must be on PATH. */
  get programs (): string[] { return this.name === 'crun' ? ['crun', 'unshare'] : ['runc'] }

  /** `<runtime> --root R <args…>`, wrapped for crun. Sync. */
  argv (args: readonly string[]): string[] {
    if (this.name === 'runc') return ['runc', '--root', this.stateRoot, ...args]
    const script = `umount ${CGROUP2_HYBRID_MOUNT} 2>/dev/null || true; exec crun --root "$@"`
    return ['unshare', '-m', '--propagation', 'private', 'sh', '-c', script, 'sh', this.stateRoot, ...args]
  }

  /** Run a container in the foreground: stdio passes straight through. */
  /** `preserveFds`: the caller's fds 3 … 3+n-1 reach the container's process as the same numbers. */
  runArgv (bundle: string, id: string, preserveFds = 0): string[] {
    return this.argv(['run', ...(preserveFds > 0 ? ['--preserve-fds', String(preserveFds)] : []), '--bundle', bundle, id])
  }
  killArgv (id: string): string[] { return this.argv(['kill', id, 'KILL']) }
  deleteArgv (id: string): string[] { return this.argv(['delete', '--force', id]) }
}
