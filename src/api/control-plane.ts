/**
 * E2B's control plane, the subset its SDKs call for a sandbox's life
 * (paths and fields from the `e2b` package's client and E2B's OpenAPI spec):
 *
 * | call | E2B SDK | here |
 * |---|---|---|
 * | `POST /v2/sandboxes` (also `/sandboxes`) `{ templateID, metadata, envVars, timeout }` | create | template = a layerd image ref; `metadata.tier` picks the tier |
 * | `GET /v2/sandboxes` (also `/sandboxes`) `?metadata=k%3Dv&state=running` | list | |
 * | `GET /sandboxes/{id}` | getInfo | |
 * | `DELETE /sandboxes/{id}` | kill | |
 * | `POST /sandboxes/{id}/timeout` `{ timeout }` | setTimeout | |
 * | `POST /v2/sandboxes/{id}/connect` `{ timeout }` | connect | a paused one is resumed from its snapshot (a new id) |
 * | `POST /sandboxes/{id}/snapshots` | createSnapshot | `layerctl commit` → `snapshot/<id>:sN`, usable as a template |
 * | `POST /sandboxes/{id}/fork` `{ timeout, count }` | fork | snapshot, then `count` sandboxes from it |
 * | `POST /sandboxes/{id}/pause` | pause | snapshot, then kill; connect resumes |
 *
 * Anything else under the API is a 404 naming the path. Metrics, network
 * updates, templates and volumes are not served.
 *
 * May import: src/errors.ts, ./ modules, node built-ins.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { BadInputError, NotFoundError } from '../errors.js'
import { DEFAULT_LIMITS } from '../runtime/sandbox.js'
import { ApiSandboxes, type LiveSandbox } from './api-sandboxes.js'
import { readJsonObject, sendJson, stringMap } from './http-io.js'

/** The envd version the SDK is told: the features it gates on that we serve (no stdin streaming, no octet-stream upload by default). */
export const ENVD_VERSION = '0.4.0'
const MAX_FORK_COUNT = 16

function created (s: LiveSandbox): Record<string, unknown> {
  return { sandboxID: s.id, templateID: s.template, clientID: 'layerd', envdVersion: ENVD_VERSION, envdAccessToken: s.token, trafficAccessToken: null, domain: null }
}

function info (s: LiveSandbox): Record<string, unknown> {
  return {
    sandboxID: s.id,
    templateID: s.template,
    clientID: 'layerd',
    startedAt: s.startedAt.toISOString(),
    endAt: s.endAt.toISOString(),
    cpuCount: 1,
    memoryMB: DEFAULT_LIMITS.memoryBytes / 1024 ** 2,
    diskSizeMB: DEFAULT_LIMITS.diskBytes / 1024 ** 2,
    metadata: s.metadata,
    state: 'running',
    envdVersion: ENVD_VERSION
  }
}

interface Paused { template: string, tier: LiveSandbox['tier'], metadata: Record<string, string>, envs: Record<string, string> }

export class ControlPlane {
  /** Paused sandboxes: id → the snapshot that resumes them. */
  readonly #paused = new Map<string, Paused>()

  constructor (private readonly sandboxes: ApiSandboxes) {}

  /** Serve one control-plane request (the key already checked). Async; throws for the server to answer in E2B's shape. */
  async handle (req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const method = req.method ?? 'GET'
    const parts = url.pathname.split('/').filter(p => p !== '')
    if (parts[0] === 'v2') parts.shift()
    if (parts[0] !== 'sandboxes') throw new NotFoundError(`no such API path: ${method} ${url.pathname}`)
    const id = parts[1] === undefined ? undefined : decodeURIComponent(parts[1])
    const action = parts[2]
    if (parts.length > 3) throw new NotFoundError(`no such API path: ${method} ${url.pathname}`)
    if (id === undefined && method === 'POST') { sendJson(res, 201, created(await this.#create(await readJsonObject(req)))); return }
    if (id === undefined && method === 'GET') { sendJson(res, 200, this.#list(url)); return }
    if (id !== undefined && action === undefined && method === 'GET') { sendJson(res, 200, info(this.sandboxes.get(id))); return }
    if (id !== undefined && action === undefined && method === 'DELETE') {
      if (this.#paused.delete(id)) { res.writeHead(204).end(); return }
      await this.sandboxes.kill(id)
      res.writeHead(204).end()
      return
    }
    if (id !== undefined && method === 'POST') {
      const body = await readJsonObject(req)
      switch (action) {
        case 'timeout':
          this.sandboxes.setTimeout(id, ApiSandboxes.timeoutS(body.timeout))
          res.writeHead(204).end()
          return
        case 'connect': sendJson(res, 200, created(await this.#connect(id, body))); return
        case 'snapshots': {
          const ref = await this.sandboxes.snapshot(id)
          sendJson(res, 201, { snapshotID: ref, names: [ref] })
          return
        }
        case 'fork': sendJson(res, 201, await this.#fork(id, body)); return
        case 'pause': await this.#pause(id); res.writeHead(204).end(); return
      }
    }
    throw new NotFoundError(`no such API path: ${method} ${url.pathname}`)
  }

  async #create (body: Record<string, unknown>): Promise<LiveSandbox> {
    const template = body.templateID
    if (typeof template !== 'string' || template === '') throw new BadInputError('templateID must be a layerd image reference (NAME:TAG)')
    const metadata = stringMap(body.metadata, 'metadata')
    return await this.sandboxes.create({
      template,
      tier: ApiSandboxes.tierOf(metadata),
      timeoutS: ApiSandboxes.timeoutS(body.timeout),
      metadata,
      envs: stringMap(body.envVars, 'envVars')
    })
  }

  #list (url: URL): unknown[] {
    const states = (url.searchParams.get('state') ?? 'running,paused').split(',')
    const wanted = new URLSearchParams(url.searchParams.get('metadata') ?? '')
    const out: unknown[] = []
    if (states.includes('running')) {
      for (const s of this.sandboxes.list()) {
        if ([...wanted].every(([k, v]) => s.metadata[k] === v)) out.push(info(s))
      }
    }
    if (states.includes('paused')) {
      for (const [id, p] of this.#paused) {
        if ([...wanted].every(([k, v]) => p.metadata[k] === v)) out.push({ sandboxID: id, templateID: p.template, clientID: 'layerd', metadata: p.metadata, state: 'paused', cpuCount: 1, memoryMB: DEFAULT_LIMITS.memoryBytes / 1024 ** 2, diskSizeMB: DEFAULT_LIMITS.diskBytes / 1024 ** 2, envdVersion: ENVD_VERSION, startedAt: new Date(0).toISOString(), endAt: new Date(0).toISOString() })
      }
    }
    return out
  }

  async #connect (id: string, body: Record<string, unknown>): Promise<LiveSandbox> {
    const paused = this.#paused.get(id)
    if (paused !== undefined) {
      const s = await this.sandboxes.create({ ...paused, timeoutS: ApiSandboxes.timeoutS(body.timeout) })
      this.#paused.delete(id)
      return s
    }
    const s = this.sandboxes.get(id)
    if (body.timeout !== undefined) this.sandboxes.setTimeout(id, ApiSandboxes.timeoutS(body.timeout))
    return s
  }

  async #fork (id: string, body: Record<string, unknown>): Promise<unknown[]> {
    const count = body.count ?? 1
    if (typeof count !== 'number' || !Number.isInteger(count) || count < 1 || count > MAX_FORK_COUNT) throw new BadInputError(`count must be a whole number from 1 to ${MAX_FORK_COUNT}`)
    const timeoutS = ApiSandboxes.timeoutS(body.timeout)
    const parent = this.sandboxes.get(id)
    const template = await this.sandboxes.snapshot(id)
    const results: unknown[] = []
    for (let i = 0; i < count; i++) {
      try {
        results.push({ sandbox: created(await this.sandboxes.create({ template, tier: parent.tier, timeoutS, metadata: parent.metadata, envs: parent.envs })) })
      } catch (err) {
        results.push({ error: { code: err instanceof NotFoundError ? 404 : 500, message: (err as Error).message } })
      }
    }
    return results
  }

  async #pause (id: string): Promise<void> {
    const s = this.sandboxes.get(id)
    const template = await this.sandboxes.snapshot(id)
    this.#paused.set(id, { template, tier: s.tier, metadata: s.metadata, envs: s.envs })
    await this.sandboxes.kill(id)
  }
}
