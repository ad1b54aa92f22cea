/**
 * Starting a child process at a cost that does not grow with this
 * process's memory: `spawnVfork()` is child_process.spawn's pipes-only
 * subset over the addon's posix_spawn (native/spawn.c). libuv forks, and a
 * fork copies the caller's page tables: from a node process of 350 MB RSS a
 * spawn took 90 ms here, against 5 ms from a small one, with the event loop
 * stopped meanwhile (bench/spawn-cost.ts). A node agent that creates
 * sandboxes spawns one runtime process (runc, crun, bwrap) per exec, so the
 * sandbox tiers start theirs here (src/runtime/process/exec-runner.ts).
 *
 * What it keeps of child_process.spawn: argv[0] searched in the child's
 * PATH (as execvp does with the child's environment), cwd, env, stdin /
 * stdout / stderr as streams plus extra pipes the child reads as fds 3, 4, …,
 * the exit code or signal, and an 'ENOENT' error for a missing program.
 * `closed` resolves as the 'close' event does: after the exit and the end of
 * stdout and stderr.
 *
 * May import: src/native.ts, node built-ins.
 */
import { accessSync, constants as fsConstants, statSync } from 'node:fs'
import { Socket } from 'node:net'
import { constants as osConstants } from 'node:os'
import { delimiter, join } from 'node:path'
import { nativeSpawnVfork } from '../native.js'

export interface VforkSpawnOptions {
  cwd?: string
  /** The child's whole environment (default: empty, as an explicit `env: {}`). */
  env?: NodeJS.ProcessEnv
  /** Extra pipes the child reads as fds 3, 4, … (default 0). */
  extraPipes?: number
  /** This process's fds the child gets next, after the extra pipes (the caller keeps and closes its own). */
  inheritFds?: number[]
}

export interface VforkChild {
  readonly pid: number
  readonly stdin: Socket
  readonly stdout: Socket
  readonly stderr: Socket
  /** Write ends of the extra pipes (the child's fds 3, 4, …). */
  readonly extra: Socket[]
  /** [exit code, null] or [null, signal], once the child has exited and stdout and stderr have ended. */
  readonly closed: Promise<[number | null, NodeJS.Signals | null]>
  /** Send a signal while the child runs (a no-op after its exit: its pid may be someone else's by then). */
  kill: (signal?: NodeJS.Signals) => void
}

/** When execvp finds no PATH in the environment, it searches this. */
const DEFAULT_PATH = '/bin:/usr/bin'
const resolved = new Map<string, string>()

/** `file` as execvp would find it with `pathVar`; an ENOENT error when it is nowhere. Sync; results are cached. */
function findProgram (file: string, pathVar: string | undefined): string {
  if (file.includes('/')) return file
  const key = `${pathVar ?? ''}\0${file}`
  const hit = resolved.get(key)
  if (hit !== undefined) return hit
  for (const dir of (pathVar ?? DEFAULT_PATH).split(delimiter)) {
    const candidate = join(dir === '' ? '.' : dir, file)
    try {
      accessSync(candidate, fsConstants.X_OK)
      if (!statSync(candidate).isFile()) continue
    } catch { continue }
    resolved.set(key, candidate)
    return candidate
  }
  throw Object.assign(new Error(`spawn ${file} ENOENT`), { code: 'ENOENT', errno: -2, syscall: `spawn ${file}`, path: file })
}

function signalName (n: number): NodeJS.Signals {
  const name = Object.entries(osConstants.signals).find(([, v]) => v === n)?.[0]
  return (name ?? 'SIGKILL') as NodeJS.Signals
}

/**
 * Start `argv` with stdin, stdout, stderr and `extraPipes` more as pipes.
 * Sync; throws an errno error (code 'ENOENT' for a program not found,
 * 'EACCES', …) when it cannot be started, UnsupportedError when the addon
 * lacks posix_spawn.
 */
export function spawnVfork (argv: readonly string[], opts: VforkSpawnOptions = {}): VforkChild {
  if (argv.length === 0) throw new TypeError('spawnVfork: argv is empty')
  const env = opts.env ?? {}
  const envp = Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined).map(([k, v]) => `${k}=${v}`)
  const path = findProgram(argv[0]!, env.PATH)
  let exited = false
  let onExit!: (code: number, signal: number) => void
  const exit = new Promise<[number | null, NodeJS.Signals | null]>(resolve => {
    onExit = (code, signal) => {
      exited = true
      resolve(signal === 0 ? [code, null] : [null, signalName(signal)])
    }
  })
  const { pid, fds } = nativeSpawnVfork()(path, [...argv], envp, opts.cwd ?? null, 3 + (opts.extraPipes ?? 0), onExit, opts.inheritFds)
  const writer = (fd: number): Socket => new Socket({ fd, readable: false, writable: true })
  const reader = (fd: number): Socket => new Socket({ fd, readable: true, writable: false })
  const stdout = reader(fds[1]!)
  const stderr = reader(fds[2]!)
  const ended = (s: Socket): Promise<void> => new Promise(resolve => { s.once('close', () => resolve()) })
  const closed = Promise.all([exit, ended(stdout), ended(stderr)]).then(([status]) => status)
  return {
    pid,
    stdin: writer(fds[0]!),
    stdout,
    stderr,
    extra: fds.slice(3).map(writer),
    closed,
    kill: (signal = 'SIGTERM') => {
      if (exited) return
      try { process.kill(pid, signal) } catch {}
    }
  }
}
