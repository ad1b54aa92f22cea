/**
 * The Docker side's registry: Debian's docker-registry (distribution 2.8)
 * on loopback with a minimal config of our own (the packaged one has
 * auth): filesystem storage in a directory, deletes enabled. Images are
 * pushed from OCI layouts with skopeo.
 *
 * Bench-only: may import fixtures/run-command.ts, fixtures/free-port.ts, node built-ins.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { openSync, closeSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { freePort } from '../../fixtures/free-port.js'
import { runCommand } from '../../fixtures/run-command.js'

const START_TIMEOUT_MS = 20_000

export { freePort } from '../../fixtures/free-port.js'

export class LocalRegistry {
  readonly port: number
  readonly dir: string
  readonly #child: ChildProcess
  readonly #exited: Promise<void>

  private constructor (port: number, dir: string, child: ChildProcess) {
    this.port = port
    this.dir = dir
    this.#child = child
    this.#exited = new Promise(resolve => child.once('exit', () => resolve()))
  }

  /** `127.0.0.1:PORT`. */
  get hostPort (): string { return `127.0.0.1:${this.port}` }

  /** Start a registry storing under `<dir>/storage`, logging to `<dir>/registry.log`. Async; rejects if it does not answer /v2/. */
  static async start (dir: string): Promise<LocalRegistry> {
    await mkdir(join(dir, 'storage'), { recursive: true })
    const port = await freePort()
    const config = join(dir, 'config.yml')
    await writeFile(config, [
      'version: 0.1',
      'log:',
      '  level: warn',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${join(dir, 'storage')}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: 127.0.0.1:${port}`,
      '  secret: layerd-deploy-bench',
      ''
    ].join('\n'))
    const logFd = openSync(join(dir, 'registry.log'), 'a')
    let child: ChildProcess
    try {
      child = spawn('docker-registry', ['serve', config], { stdio: ['ignore', logFd, logFd] })
    } finally {
      closeSync(logFd)
    }
    const registry = new LocalRegistry(port, dir, child)
    const deadline = Date.now() + START_TIMEOUT_MS
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`docker-registry exited with ${child.exitCode}; see ${join(dir, 'registry.log')}`)
      const ok = await fetch(`http://${registry.hostPort}/v2/`).then(r => r.ok, () => false)
      if (ok) return registry
      await new Promise(resolve => setTimeout(resolve, 100))
    }
    await registry.stop()
    throw new Error(`docker-registry did not answer on ${registry.hostPort} within ${START_TIMEOUT_MS} ms`)
  }

  /** Push the OCI layout's 'latest' image as `<host>/<ref>` (skopeo; blobs already there are skipped). Async. */
  async push (layout: string, ref: string): Promise<void> {
    await runCommand('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', `oci:${layout}:latest`, `docker://${this.hostPort}/${ref}`])
  }

  /** Kill the registry and wait for it. Idempotent. Async. */
  async stop (): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill('SIGTERM')
    await this.#exited
  }
}
