/**
 * The eStargz peer (containerd/stargz-snapshotter's stargz-store) as a
 * benchmark contender, run beside layerd in one process.
 *
 * - Binaries: `../shared/peers/stargz-store.sh` builds `stargz-store` and
 *   `estargz-convert` from Debian packages alone (idempotent: a stamp check
 *   when they are built). `LAYERD_PEERS_DIR` names another folder holding
 *   that script; `LAYERD_PEERS_CACHE` where it puts the binaries.
 * - Image: an OCI layout copied, converted in place to eStargz (a new tag
 *   `esgz`, OCI media types, TOC annotations), and copied with skopeo to a
 *   loopback docker-registry. Conversion is set-up, not timed.
 * - Node: one `stargz-store` process with a fresh `-root` (empty caches) and
 *   its own FUSE mountpoint; no prefetch, no background fetch, so the bytes
 *   it fetches are what the workload touched. Each layer's `diff` is looked
 *   up (this fetches the manifest, config, footer and TOC), and the layers
 *   are stacked with overlayfs into a root, as its snapshotter would.
 *
 * Bench-only: may import anything.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, openSync } from 'node:fs'
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { runCommand } from '../../fixtures/run-command.js'

const START_TIMEOUT_MS = 20_000
const STOP_TIMEOUT_MS = 5_000

export interface StargzBinaries { store: string, convert: string }

/** Where `stargz-store.sh` lives: $LAYERD_PEERS_DIR, else the nearest `shared/peers` beside the checkout or above it. */
function peersDir (): string {
  const env = process.env.LAYERD_PEERS_DIR
  if (env !== undefined && env !== '') return env
  let dir = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
  for (;;) {
    const candidate = resolve(dir, '../shared/peers')
    if (existsSync(join(candidate, 'stargz-store.sh')) || dirname(dir) === dir) return candidate
    dir = dirname(dir)
  }
}

/** Build (or find) the peer's binaries. Async; rejects naming the script when it is missing or fails. */
export async function ensureStargzBinaries (): Promise<StargzBinaries> {
  const script = join(peersDir(), 'stargz-store.sh')
  if (!existsSync(script)) throw new Error(`stargz-store peer: ${script} not found (set LAYERD_PEERS_DIR to the folder holding stargz-store.sh)`)
  await runCommand('bash', [script])
  const bin = join(process.env.LAYERD_PEERS_CACHE ?? '/var/cache/layerd-peers', 'bin')
  return { store: join(bin, 'stargz-store'), convert: join(bin, 'estargz-convert') }
}

export interface EstargzImage {
  /** Full reference as stargz-store is asked for it, e.g. `127.0.0.1:5000/bench/python:esgz`. */
  ref: string
  /** Compressed digests of the layers, bottom first. */
  layers: string[]
  /** Σ of the eStargz layer blob sizes. */
  storedBytes: number
}

interface OciIndex { manifests: Array<{ digest: string, annotations?: Record<string, string> }> }
interface OciManifest { layers: Array<{ digest: string, size: number }> }

/**
 * Convert `layout`'s image tagged `tag` to eStargz in a copy under `work`,
 * and push it as `repo:esgz` to the registry at `registryHostPort` (plain
 * HTTP). Async.
 */
export async function publishEstargz (bins: StargzBinaries, layout: string, tag: string, work: string, registryHostPort: string, repo: string): Promise<EstargzImage> {
  const copy = join(work, 'estargz-layout')
  await rm(copy, { recursive: true, force: true })
  await runCommand('cp', ['-a', layout, copy])
  await runCommand(bins.convert, [copy, tag, 'esgz'])
  const index = JSON.parse(await readFile(join(copy, 'index.json'), 'utf8')) as OciIndex
  const entry = index.manifests.find(m => m.annotations?.['org.opencontainers.image.ref.name'] === 'esgz')
  if (entry === undefined) throw new Error(`estargz-convert left no 'esgz' tag in ${copy}/index.json`)
  const blob = (d: string): string => join(copy, 'blobs', ...d.split(':'))
  const manifest = JSON.parse(await readFile(blob(entry.digest), 'utf8')) as OciManifest
  await runCommand('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', `oci:${copy}:esgz`, `docker://${registryHostPort}/${repo}:esgz`])
  return { ref: `${registryHostPort}/${repo}:esgz`, layers: manifest.layers.map(l => l.digest), storedBytes: manifest.layers.reduce((n, l) => n + l.size, 0) }
}

/** One cold stargz-store node: its own root (caches) and mountpoint under `dir`. */
export class StargzNode {
  readonly dir: string
  readonly mountpoint: string
  readonly #child: ChildProcess
  readonly #exited: Promise<void>
  #roots: Array<{ root: string, options: string }> = []

  private constructor (dir: string, child: ChildProcess) {
    this.dir = dir
    this.mountpoint = join(dir, 'mnt')
    this.#child = child
    this.#exited = new Promise(resolve => child.once('exit', () => resolve()))
  }

  /**
   * Start stargz-store reading from the plain-HTTP registry at `registryHostPort`
   * (a throttle proxy's address, or the registry's own). Resolves once its FUSE
   * mount is in /proc/mounts. Async; rejects with its log when it does not come up.
   */
  static async start (bins: StargzBinaries, dir: string, registryHostPort: string): Promise<StargzNode> {
    await mkdir(join(dir, 'mnt'), { recursive: true })
    await mkdir(join(dir, 'root'), { recursive: true })
    const config = [
      'noprefetch = true',
      'no_background_fetch = true',
      'no_prometheus = true',
      `[[resolver.host."${registryHostPort}".mirrors]]`,
      `host = "${registryHostPort}"`,
      'insecure = true',
      ''
    ].join('\n')
    await writeFile(join(dir, 'store.toml'), config)
    const log = openSync(join(dir, 'store.log'), 'a')
    const child = spawn(bins.store, ['-config', join(dir, 'store.toml'), '-root', join(dir, 'root'), '-log-level', 'info', join(dir, 'mnt')], { stdio: ['ignore', log, log] })
    closeSync(log)
    const node = new StargzNode(dir, child)
    const deadline = Date.now() + START_TIMEOUT_MS
    while (Date.now() < deadline && child.exitCode === null) {
      if (await node.#mounted()) return node
      await new Promise(resolve => setTimeout(resolve, 10))
    }
    await node.stop()
    throw new Error(`stargz-store did not mount ${node.mountpoint}: ${(await readFile(join(dir, 'store.log'), 'utf8')).slice(-2000)}`)
  }

  /** The stargz-store process. */
  get pid (): number | undefined { return this.#child.pid }

  async #mounted (): Promise<boolean> {
    const mounts = await readFile('/proc/self/mountinfo', 'utf8')
    return mounts.split('\n').some(l => l.split(' ')[4] === this.mountpoint)
  }

  /** Look up each layer's diff (bottom first) and overlay them into `<dir>/root-N`. Returns the root. Async. */
  async rootfs (image: EstargzImage): Promise<string> {
    const refDir = join(this.mountpoint, Buffer.from(image.ref).toString('base64'))
    const diffs = await Promise.all(image.layers.map(async d => {
      const diff = join(refDir, d, 'diff')
      await stat(diff)
      return diff
    }))
    const root = join(this.dir, `rootfs-${this.#roots.length}`)
    const work = join(this.dir, `ovl-${this.#roots.length}`)
    await mkdir(root, { recursive: true })
    await mkdir(join(work, 'upper'), { recursive: true })
    await mkdir(join(work, 'work'), { recursive: true })
    // overlayfs splits lowerdir at ':', and every layer path holds one (sha256:…): escape it (a symlink
    // without the colon worked, but mount(2) sometimes answered ELOOP resolving it into the FUSE tree).
    const lower = [...diffs].reverse().map(d => d.replace(/([\\:,])/g, '\\$1')).join(':')
    const options = `lowerdir=${lower},upperdir=${work}/upper,workdir=${work}/work`
    await runCommand('mount', ['-t', 'overlay', 'overlay', '-o', options, root])
    this.#roots.push({ root, options })
    return root
  }

  /** Unmount every root and mount it again (its dentries and inodes go; the store's caches stay). Async. */
  async remountRoots (): Promise<void> {
    for (const { root, options } of this.#roots) {
      await runCommand('umount', [root])
      await runCommand('mount', ['-t', 'overlay', 'overlay', '-o', options, root])
    }
  }

  /** Unmount the roots, stop the store (SIGINT: it unmounts itself), and clean up. Idempotent. Async. */
  async stop (): Promise<void> {
    for (const { root } of this.#roots) await runCommand('umount', [root]).catch(async () => await runCommand('umount', ['-l', root]).catch(() => {}))
    this.#roots = []
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill('SIGINT')
      const timer = setTimeout(() => this.#child.kill('SIGKILL'), STOP_TIMEOUT_MS)
      await this.#exited
      clearTimeout(timer)
    }
    if (await this.#mounted()) await runCommand('umount', ['-l', this.mountpoint]).catch(() => {})
    await rm(this.dir, { recursive: true, force: true })
  }
}
