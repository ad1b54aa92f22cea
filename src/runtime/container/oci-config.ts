/**
 * The OCI runtime-spec `config.json` for one exec in a container-tier
 * sandbox (https://github.com/opencontainers/runtime-spec/blob/main/config.md).
 *
 * - process: argv/env/cwd/uid/gid from `../process/exec-context.ts`;
 *   docker's default capabilities minus MKNOD, NET_RAW, SYS_CHROOT, SETFCAP
 *   and AUDIT_WRITE (bounding set only for non-root users, as docker does
 *   since 20.10.14, so a non-root process holds none); no_new_privileges;
 *   RLIMIT_NOFILE and RLIMIT_CORE.
 * - root: the overlay's merged dir, writable (the overlay is the writable layer).
 * - mounts: /proc, a tmpfs /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys
 *   read-only: kernel filesystems only, no host path.
 * - linux: new pid, ipc, uts, mount, network and cgroup namespaces; runc's
 *   default masked and read-only paths; pids and memory limits; no devices
 *   beyond the runtime's defaults (null, zero, full, random, urandom, tty,
 *   ptmx); the shared seccomp profile.
 *
 * Pure but for `readNofileHardLimit`, which reads /proc/self/limits.
 */
import { readFileSync } from 'node:fs'
import type { ExecContext } from '../process/exec-context.js'
import { ociSeccompProfile } from '../seccomp/oci-seccomp.js'

export const CONTAINER_CAPABILITIES = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_SETGID', 'CAP_SETUID',
  'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_KILL'
]

export const MASKED_PATHS = [
  '/proc/acpi', '/proc/asound', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list',
  '/proc/timer_stats', '/proc/sched_debug', '/proc/scsi', '/sys/firmware', '/sys/devices/virtual/powercap'
]
export const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger']

/** Raising a hard limit needs CAP_SYS_RESOURCE, which this host's root may lack: never ask above the caller's. */
export const NOFILE_LIMIT_WANTED = 65536

export interface OciConfigInput {
  ctx: ExecContext
  rootPath: string
  hostname: string
  pids: number
  memoryBytes: number
  /** The runtime's cgroup for this exec, e.g. `/layerd/<sandbox>/e1`. */
  cgroupsPath: string
  devShmBytes: number
  /** The caller's hard RLIMIT_NOFILE (see `readNofileHardLimit`); the container gets min(65536, this). */
  nofileHardLimit: number
  /** Where runc sends the seccomp listener: denied calls are then notifications a supervisor answers and records. */
  seccompListenerPath?: string
  /** false: no seccomp profile at all (a test-only switch: what the other walls hold alone). */
  seccomp?: boolean
  /** Runs first, with the command after it (layerd-wall and its options). */
  commandPrefix?: string[]
}

/** The config object; serialise with JSON.stringify. Sync. */
export function ociRuntimeConfig (i: OciConfigInput): Record<string, unknown> {
  const { ctx } = i
  const root = ctx.user.uid === 0
  const shmKiB = Math.ceil(i.devShmBytes / 1024)
  const nofile = Math.min(NOFILE_LIMIT_WANTED, i.nofileHardLimit)
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: ctx.user.uid, gid: ctx.user.gid, ...(ctx.user.additionalGids.length > 0 ? { additionalGids: ctx.user.additionalGids } : {}) },
      args: [...(i.commandPrefix ?? []), ...ctx.argv],
      env: ctx.env,
      cwd: ctx.cwd,
      capabilities: {
        bounding: CONTAINER_CAPABILITIES,
        effective: root ? CONTAINER_CAPABILITIES : [],
        permitted: root ? CONTAINER_CAPABILITIES : [],
        inheritable: [],
        ambient: []
      },
      rlimits: [
        { type: 'RLIMIT_NOFILE', hard: nofile, soft: nofile },
        { type: 'RLIMIT_CORE', hard: 0, soft: 0 }
      ],
      noNewPrivileges: true
    },
    root: { path: i.rootPath, readonly: false },
    hostname: i.hostname,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', `size=${shmKiB}k`] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] }
    ],
    linux: {
      namespaces: ['pid', 'ipc', 'uts', 'mount', 'network', 'cgroup'].map(type => ({ type })),
      resources: {
        devices: [{ allow: false, access: 'rwm' }],
        pids: { limit: i.pids },
        memory: { limit: i.memoryBytes }
      },
      cgroupsPath: i.cgroupsPath,
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
      ...(i.seccomp === false ? {} : { seccomp: ociSeccompProfile(i.seccompListenerPath) })
    }
  }
}

/** The hard "Max open files" of this process, from /proc/self/limits (1024 when unreadable). Sync. */
export function readNofileHardLimit (): number {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find(l => l.startsWith('Max open files'))
    const hard = line?.trim().split(/\s+/)[4]
    return hard === 'unlimited' ? Number.MAX_SAFE_INTEGER : Number(hard) > 0 ? Number(hard) : 1024
  } catch {
    return 1024
  }
}
