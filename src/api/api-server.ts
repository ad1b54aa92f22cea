/**
 * The HTTP server of layerd's E2B-compatible API: one endpoint for the
 * control plane and for every sandbox's envd calls. A request that carries
 * `E2b-Sandbox-Id` is an envd call for that sandbox (the SDK adds the header
 * to each one, so `E2B_SANDBOX_URL` can point here), checked against that
 * sandbox's `X-Access-Token`; any other needs a key in `X-API-Key`.
 *
 * Every request is answered, errors included, and none can stop the server:
 * a handler's failure becomes an error answer (./api-errors.ts), a body past
 * its cap a 413, a client that sends its headers or body too slowly is cut
 * off by Node's server timeouts. An unknown sandbox's envd calls get 502,
 * what E2B's proxy answers for a sandbox that is gone (the SDK reports it so).
 *
 * May import: src/errors.ts, ./ modules, node built-ins.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { BadInputError, NotFoundError, UnsupportedError, describeError } from '../errors.js'
import { apiFailure, CONNECT_STATUS } from './api-errors.js'
import { tokenMatches, type ApiKeys } from './api-auth.js'
import type { ApiSandboxes, LiveSandbox } from './api-sandboxes.js'
import { ConnectStream, connectKind, requestMessage, sendUnary, sendUnaryError } from './connect-framing.js'
import { ControlPlane } from './control-plane.js'
import { getFile, postFile } from './files-endpoint.js'
import { filesystemMethods, UNSERVED_FILESYSTEM_METHODS } from './filesystem-service.js'
import { MAX_JSON_BODY_BYTES, readBody, sendE2bError, sendJson } from './http-io.js'
import { processMethods, STREAMING_PROCESS_METHODS, UNSERVED_PROCESS_METHODS, type CallContext } from './process-service.js'

/** A client has this long to send its headers, and its whole request. */
const HEADERS_TIMEOUT_MS = 10_000
const REQUEST_TIMEOUT_MS = 300_000
const DEFAULT_KEEPALIVE_MS = 50_000
const MIN_KEEPALIVE_MS = 1_000

export interface ApiServerOptions { keys: ApiKeys, sandboxes: ApiSandboxes, log: (line: string) => void }

export function createApiServer (opts: ApiServerOptions): Server {
  const control = new ControlPlane(opts.sandboxes)
  const server = createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS }, (req, res) => {
    handle(req, res).catch((err: unknown) => {
      opts.log(`api: ${req.method ?? '?'} ${req.url ?? '?'}: ${describeError(err)}`)
      if (!res.headersSent) sendE2bError(res, 500, describeError(err))
      else res.destroy()
    })
  })
  server.on('clientError', (_err, socket) => { socket.destroy() })

  async function handle (req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL
    try { url = new URL(req.url ?? '/', 'http://api') } catch { sendE2bError(res, 400, 'bad request URL'); return }
    const sandboxId = req.headers['e2b-sandbox-id']
    if (typeof sandboxId === 'string') { await envd(req, res, url, sandboxId); return }
    if (url.pathname === '/health') { sendJson(res, 200, { status: 'ok' }); return }
    if (!opts.keys.configured) { sendE2bError(res, 401, 'this node has no API keys: set LAYERD_API_KEYS or write <home>/api-keys'); return }
    if (!opts.keys.accepts(req.headers['x-api-key'])) { sendE2bError(res, 401, 'invalid API key (X-API-Key)'); return }
    try {
      await control.handle(req, res, url)
    } catch (err) {
      const status = (err as { status?: number }).status ?? CONNECT_STATUS[apiFailure(err).code]
      sendE2bError(res, status, describeError(err))
      req.resume()
    }
  }

  async function envd (req: IncomingMessage, res: ServerResponse, url: URL, id: string): Promise<void> {
    let live: LiveSandbox
    try { live = opts.sandboxes.get(id) } catch { sendE2bError(res, 502, `sandbox ${id} is not running on this node`); req.resume(); return }
    if (!tokenMatches(live.token, req.headers['x-access-token'])) { sendE2bError(res, 401, `invalid access token for sandbox ${id} (X-Access-Token)`); req.resume(); return }
    if (url.pathname === '/health') { res.writeHead(204).end(); return }
    if (url.pathname === '/files') {
      try {
        if (live.files === undefined) throw new UnsupportedError(`the files of a ${live.tier} sandbox are not served: process and container tiers only`)
        if (req.method === 'GET') { await getFile(res, url, live.files); return }
        if (req.method === 'POST') { sendJson(res, 200, await postFile(req, res, url, live.files)); return }
        throw new NotFoundError(`${req.method ?? '?'} /files is not served`)
      } catch (err) {
        const status = (err as { status?: number }).status ?? filesStatus(err)
        sendE2bError(res, status, describeError(err))
        req.resume()
      }
      return
    }
    await rpc(req, res, url, live)
  }

  async function rpc (req: IncomingMessage, res: ServerResponse, url: URL, live: LiveSandbox): Promise<void> {
    const kind = connectKind(req.headers['content-type'])
    const [, service, method] = url.pathname.split('/')
    if (req.method !== 'POST' || kind === undefined || service === undefined || method === undefined) {
      sendUnaryError(res, { code: 'invalid_argument', message: 'envd calls are Connect calls: POST /<service>/<method> with application/json or application/connect+json' })
      req.resume()
      return
    }
    let stream: ConnectStream | undefined
    try {
      const body = await readBody(req, MAX_JSON_BODY_BYTES)
      const msg = requestMessage(kind, body) as Record<string, unknown>
      if (service === 'process.Process') {
        const ctx = callContext(req, live)
        if (STREAMING_PROCESS_METHODS.has(method)) {
          if (kind !== 'stream') throw new BadInputError(`${method} is a streaming call: send application/connect+json`)
          stream = new ConnectStream(res)
          const gone = (fn: () => void): void => { res.on('close', fn) }
          await processMethods[method as 'Start' | 'Connect'](msg, ctx, stream, gone)
          return
        }
        if (method === 'List' || method === 'SendSignal') { sendUnary(res, processMethods[method](msg, ctx)); return }
        if (UNSERVED_PROCESS_METHODS.has(method)) throw new UnsupportedError(`process.Process/${method} is not served by layerd (no stdin or PTY)`)
      } else if (service === 'filesystem.Filesystem') {
        const fn = filesystemMethods[method]
        if (fn !== undefined && Object.hasOwn(filesystemMethods, method)) {
          if (live.files === undefined) throw new UnsupportedError(`the files of a ${live.tier} sandbox are not served: process and container tiers only`)
          sendUnary(res, await fn(msg, live.files))
          return
        }
        if (UNSERVED_FILESYSTEM_METHODS.has(method)) throw new UnsupportedError(`filesystem.Filesystem/${method} (watching) is not served by layerd`)
      }
      throw new UnsupportedError(`no such method: ${service}/${method}`)
    } catch (err) {
      const failure = apiFailure(err)
      if ((err as { status?: number }).status === 413) failure.code = 'resource_exhausted'
      if (stream !== undefined) stream.end(failure)
      else if (!res.headersSent) sendUnaryError(res, failure)
      req.resume()
    }
  }

  return server
}

function callContext (req: IncomingMessage, live: LiveSandbox): CallContext {
  const keepalive = Number(req.headers['keepalive-ping-interval'])
  const timeout = Number(req.headers['connect-timeout-ms'])
  return {
    processes: live.processes,
    ...basicUser(req.headers.authorization),
    keepaliveMs: Number.isFinite(keepalive) && keepalive > 0 ? Math.max(MIN_KEEPALIVE_MS, keepalive * 1000) : DEFAULT_KEEPALIVE_MS,
    ...(Number.isFinite(timeout) && timeout > 0 ? { deadlineMs: timeout } : {})
  }
}

/** The user of the SDK's `Authorization: Basic base64(user:)`, which names who runs a command. */
function basicUser (header: string | undefined): { user?: string } {
  if (header === undefined || !header.startsWith('Basic ')) return {}
  const user = Buffer.from(header.slice(6), 'base64').toString('utf8').split(':')[0] ?? ''
  return user === '' ? {} : { user }
}

/** envd's statuses for file calls: 507 for a full disk, else the Connect code's. */
function filesStatus (err: unknown): number {
  const code = (err as NodeJS.ErrnoException).code
  if (code === 'ENOSPC' || code === 'EDQUOT') return 507
  return CONNECT_STATUS[apiFailure(err).code]
}
