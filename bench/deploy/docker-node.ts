/**
 * The Docker side of one simulated node: its own containerd and dockerd
 * (overlay2), data on the node's disk, runtime state (sockets, pid files,
 * bundles: tmpfs on a real host) outside it, driven with the Debian docker
 * CLI (/usr/bin/docker, the engine's own version).
 *
 * The node is isolated from any other Docker on the machine: containerd is
 * started here with its own root, state and socket (dockerd would otherwise
 * adopt a system containerd at /run/containerd), and dockerd has no bridge
 * and no iptables rules (containers run with --network none, as layerd's
 * container tier has no network either).
 *
 * Bench-only: may import fixtures/run-command.ts, node built-ins.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, openSync } from 'node:fs'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { request } from 'node:http'
import { join } from 'node:path'
import { runProgram, type CommandResult } from '../../fixtures/run-command.js'

export const DOCKER_CLI = '/usr/bin/docker'
const START_TIMEOUT_MS = 30_000
const STOP_TIMEOUT_MS = 30_000

export interface DockerNodeOptions {
  /** On the node's disk: dockerd's data root and containerd's root live here. */
  dataDir: string
  /** Off the node's disk: sockets, pid files, exec roots, logs. */
  runDir: string
}


/** VmHWM (peak resident set) of a live process, in bytes; 0 when it is gone. */
export async function peakRssOf (pid: number): Promise<number> {
  try {
    const m = /^VmHWM:\s+(\d+) kB$/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))
    return m === null ? 0 : Number(m[1]) * 1024
  } catch { return 0 }
}

/** Resident set now, split: anonymous (heap) and file-backed (mapped files, reclaimable), bytes. */
export async function rssSplitOf (pid: number): Promise<{ anon: number, file: number }> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8')
    const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status)?.[1] ?? 0) * 1024
    return { anon: kb('RssAnon'), file: kb('RssFile') + kb('RssShmem') }
  } catch { return { anon: 0, file: 0 } }
}

export class DockerNode {
  readonly #run: string
  readonly #containerd: ChildProcess
  readonly #dockerd: ChildProcess
  readonly #env: NodeJS.ProcessEnv

  private constructor (runDir: string, containerd: ChildProcess, dockerd: ChildProcess) {
    this.#run = runDir
    this.#containerd = containerd
    this.#dockerd = dockerd
    // An empty client config: no credential helpers of the host's root user.
    this.#env = { ...process.env, DOCKER_CONFIG: join(runDir, 'client') }
  }

  get socket (): string { return join(this.#run, 'docker.sock') }

  /** Start containerd and dockerd for this node and wait until the engine answers /_ping. Async. */
  static async start (opts: DockerNodeOptions): Promise<DockerNode> {
    const run = opts.runDir
    await mkdir(join(run, 'client'), { recursive: true })
    await mkdir(opts.dataDir, { recursive: true })
    const ctdConfig = join(run, 'containerd.toml')
    await writeFile(ctdConfig, [
      'version = 2',
      `root = "${join(opts.dataDir, 'containerd')}"`,
      `state = "${join(run, 'containerd-state')}"`,
      'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
      '[grpc]',
      `  address = "${join(run, 'containerd.sock')}"`,
      '[ttrpc]',
      `  address = "${join(run, 'containerd.sock.ttrpc')}"`,
      '[debug]',
      '  address = ""',
      '[metrics]',
      '  address = ""',
      ''
    ].join('\n'))
    const containerd = spawnLogged('containerd', ['--config', ctdConfig], join(run, 'containerd.log'))
    const dockerd = spawnLogged('dockerd', [
      '--containerd', join(run, 'containerd.sock'),
      '--storage-driver', 'overlay2',
      '--data-root', join(opts.dataDir, 'docker'),
      '--exec-root', join(run, 'exec'),
      '--pidfile', join(run, 'docker.pid'),
      '-H', `unix://${join(run, 'docker.sock')}`,
      '--bridge', 'none', '--iptables=false', '--ip6tables=false', '--ip-masq=false'
    ], join(run, 'dockerd.log'))
    const node = new DockerNode(run, containerd, dockerd)
    const deadline = Date.now() + START_TIMEOUT_MS
    while (Date.now() < deadline) {
      for (const [name, p] of [['containerd', containerd], ['dockerd', dockerd]] as const) {
        if (p.exitCode !== null) { await node.stop(); throw new Error(`${name} exited with ${p.exitCode}; see ${join(run, `${name}.log`)}`) }
      }
      if (await ping(node.socket)) return node
      await new Promise(resolve => setTimeout(resolve, 100))
    }
    await node.stop()
    throw new Error(`dockerd did not answer on ${node.socket} within ${START_TIMEOUT_MS} ms; see ${join(run, 'dockerd.log')}`)
  }

  /** `docker ARGS…` against this node. Async; resolves with the exit code. */
  async docker (...args: string[]): Promise<CommandResult> {
    return await runProgram(DOCKER_CLI, ['-H', `unix://${this.socket}`, ...args], this.#env)
  }

  /** `docker pull -q REF`. Async; rejects with docker's message on failure. */
  async pull (ref: string): Promise<void> {
    const r = await this.docker('pull', '-q', ref)
    if (r.code !== 0) throw new Error(`docker pull ${ref} failed (${r.code}): ${r.stderr.trim()}`)
  }

  /** The two daemons' process ids. */
  get pids (): Record<string, number> { return { dockerd: this.#dockerd.pid!, containerd: this.#containerd.pid! } }

  /** The two daemons' peak resident sets (VmHWM), bytes. */
  async peakRss (): Promise<{ dockerd: number, containerd: number }> {
    return { dockerd: await peakRssOf(this.#dockerd.pid!), containerd: await peakRssOf(this.#containerd.pid!) }
  }

  /** The two daemons' resident sets now, anonymous and file-backed, summed. */
  async rssSplit (): Promise<{ anon: number, file: number }> {
    const a = await rssSplitOf(this.#dockerd.pid!)
    const b = await rssSplitOf(this.#containerd.pid!)
    return { anon: a.anon + b.anon, file: a.file + b.file }
  }

  /** SIGTERM dockerd, then containerd, waiting for each. Idempotent. Async. */
  async stop (): Promise<void> {
    await stopChild(this.#dockerd)
    await stopChild(this.#containerd)
  }
}

function spawnLogged (cmd: string, args: string[], logFile: string): ChildProcess {
  const fd = openSync(logFile, 'a')
  try {
    return spawn(cmd, args, { stdio: ['ignore', fd, fd] })
  } finally {
    closeSync(fd)
  }
}

async function stopChild (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>(resolve => child.once('exit', () => resolve()))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS)
  await exited
  clearTimeout(timer)
}

async function ping (socketPath: string): Promise<boolean> {
  return await new Promise(resolve => {
    const req = request({ socketPath, path: '/_ping', timeout: 2000 }, res => { res.resume(); resolve(res.statusCode === 200) })
    req.on('error', () => resolve(false))
    req.on('timeout', () => { req.destroy(); resolve(false) })
    req.end()
  })
}
