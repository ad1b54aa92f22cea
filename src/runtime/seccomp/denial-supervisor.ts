/**
 * Every call the deny policy refuses, recorded: the Linux tiers' filters
 * return SECCOMP_RET_USER_NOTIF for those calls (`bpf-filter.ts`,
 * `oci-seccomp.ts`), and a supervisor thread in this process
 * (native/seccomp_supervisor.c) answers each EPERM at once and passes a copy
 * here, where it becomes a {@link DenialEvent} for the sandbox's sink.
 *
 * The answer is given on the supervisor's own thread, before JavaScript
 * hears of it: a sandbox never waits on this process's event loop, and a
 * stalled loop (or a slow sink) loses records, never answers. A sandbox
 * that floods denied calls gets every one refused and at most
 * {@link EVENT_BURST} events at once, then {@link EVENT_RATE_PER_SECOND};
 * the rest are counted and reported in one `dropped` call at the end.
 *
 * May import: src/native.ts, the modules next to it.
 */
import { nativeSeccompSupervisor, type SupervisorMessage } from '../../native.js'
import type { DenialContext, DenialSink } from './denial-event.js'
import { CLONE_NAMESPACE_FLAGS, DENIED_IOCTLS, DENIED_SYSCALLS, IOCTL_SYSCALL, NAMESPACE_FLAG_SYSCALLS } from './deny-policy.js'

export const EVENT_BURST = 64
export const EVENT_RATE_PER_SECOND = 20

/** How the listener fd reaches the supervisor. */
export type ListenerSource =
  /** A connected socket (layerd-wall sends it after installing its filter). */
  | { kind: 'socket', fd: number }
  /** A listening socket runc connects to (linux.seccomp.listenerPath). */
  | { kind: 'listen', fd: number }

export interface SupervisorSummary { answered: number, dropped: number, error?: string }

const SYSCALL_NAMES = new Map<number, string>([
  ...Object.entries(DENIED_SYSCALLS).map(([name, nr]) => [nr, name] as [number, string]),
  ...Object.entries(NAMESPACE_FLAG_SYSCALLS).map(([name, nr]) => [nr, name] as [number, string]),
  [IOCTL_SYSCALL, 'ioctl']
])

/** Syscalls whose argument `arg` is a path (or a filesystem name) worth reading from the caller's memory. */
const PATH_ARGUMENTS: ReadonlyArray<[string, number]> = [
  ['mount', 1], ['umount2', 0], ['pivot_root', 0], ['open_tree', 1], ['move_mount', 1], ['fsopen', 0],
  ['fspick', 1], ['mount_setattr', 1], ['open_tree_attr', 1], ['swapon', 0], ['swapoff', 0], ['acct', 0],
  ['name_to_handle_at', 1], ['uselib', 0], ['quotactl', 1]
]
const PATH_RULES = Int32Array.from(PATH_ARGUMENTS.flatMap(([name, arg]) => [DENIED_SYSCALLS[name]!, arg]))

const NAMESPACE_FLAG_NAMES: ReadonlyArray<[number, string]> = [
  [0x00020000, 'CLONE_NEWNS'], [0x02000000, 'CLONE_NEWCGROUP'], [0x04000000, 'CLONE_NEWUTS'], [0x08000000, 'CLONE_NEWIPC'],
  [0x10000000, 'CLONE_NEWUSER'], [0x20000000, 'CLONE_NEWPID'], [0x40000000, 'CLONE_NEWNET'], [0x80, 'CLONE_NEWTIME']
]

const hex = (v: bigint | number): string => `0x${v.toString(16)}`

/** The name of the first denied-ioctl pattern `request` matches. */
function ioctlName (request: number): string | undefined {
  return DENIED_IOCTLS.find(d => ((request & d.mask) >>> 0) === d.value)?.name
}

/** What a denied call was aimed at, in words a reader can act on. Pure. */
export function describeObject (nr: number, args: readonly bigint[], path?: string): string {
  if (nr === IOCTL_SYSCALL) {
    const request = Number(args[1]! & 0xffffffffn)
    const name = ioctlName(request)
    return `fd ${args[0]} request ${hex(request)}${name === undefined ? '' : ` (${name})`}`
  }
  if (Object.values(NAMESPACE_FLAG_SYSCALLS).includes(nr)) {
    const flags = Number(args[0]! & 0xffffffffn)
    const names = NAMESPACE_FLAG_NAMES.filter(([bit]) => (flags & bit & CLONE_NAMESPACE_FLAGS) !== 0).map(([, n]) => n)
    return `flags ${hex(flags)} (${names.join('|')})`
  }
  if (path !== undefined) return path
  return args.slice(0, 3).map(hex).join(' ')
}

/** The syscall's name, or `syscall_N` for one the policy does not name. */
export function syscallName (nr: number): string {
  return SYSCALL_NAMES.get(nr) ?? `syscall_${nr}`
}

/**
 * Supervise one command's seccomp listener. Takes ownership of
 * `source.fd`. `stop()` ends it (when the command is over and no listener
 * ever came, say) and resolves once every event it received has reached
 * the sink. Sync to start; throws UnsupportedError when the addon is too old.
 */
export function superviseDenials (source: ListenerSource, who: DenialContext, sink: DenialSink): { stop: () => Promise<SupervisorSummary>, done: Promise<SupervisorSummary> } {
  const native = nativeSeccompSupervisor()
  let ended = false
  let finish!: (s: SupervisorSummary) => void
  const done = new Promise<SupervisorSummary>(resolve => { finish = resolve })
  const onMessage = (m: SupervisorMessage): void => {
    if (m.ended) {
      ended = true
      if (m.dropped > 0) sink.dropped(who, m.dropped)
      finish({ answered: m.answered, dropped: m.dropped, ...(m.error === undefined ? {} : { error: m.error }) })
      return
    }
    sink.record({
      time: new Date(m.time).toISOString(),
      ...who,
      hook: `seccomp:${syscallName(m.nr)}`,
      object: describeObject(m.nr, m.args, m.path),
      comm: m.comm,
      pid: m.nspid,
      args: m.args.map(hex)
    })
  }
  const stopFd = native.seccompSupervise(source.fd, source.kind === 'listen' ? 1 : 0, PATH_RULES, EVENT_BURST, EVENT_RATE_PER_SECOND, onMessage)
  return {
    done,
    stop: async () => {
      if (!ended) native.seccompSupervisorStop(stopFd)
      return await done
    }
  }
}
