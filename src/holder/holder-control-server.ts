/**
 * `<home>/holder.sock`: the holder's control socket (mode 0600), JSON lines:
 * `{ id, method: 'status' | 'restart', params?: { entry? } }` →
 * `{ id, result } | { id, error: { code, message } }`. Its client is
 * holder-client.ts (`layerctl daemon status/restart`).
 *
 * May import: src/errors.ts, ./fd-store-protocol.ts, node built-ins.
 */
import { chmod, rm } from 'node:fs/promises'
import { createServer, type Server, type Socket } from 'node:net'
import { join } from 'node:path'
import { HolderError, LayerdError, describeError } from '../errors.js'
import { HOLDER_SOCKET, MAX_MESSAGE_BYTES } from './fd-store-protocol.js'

export interface HolderStatus {
  /** The holder's pid (`layerctl daemon status --json`'s `holder.pid`). */
  pid: number
  holderPid: number
  daemonPid: number | null
  /** When the current layerd reported that it serves (ISO), or null. */
  daemonReadyAt: string | null
  daemonEntry: string
  startedAt: string
  /** Crash restarts: layerd starts after the first that were not planned. */
  restarts: number
  /** Planned restarts (`layerctl daemon restart`) that completed. */
  plannedRestarts: number
  /** The warm standby's pid (null when none is kept or it is still to start). */
  standbyPid: number | null
  keptFds: number
}

export interface RestartResult { oldPid: number | null, newPid: number, ms: number }

/** What the socket answers from. */
export interface HolderControls {
  status: () => HolderStatus
  /** Rejects with a LayerdError (answered with its code) or anything else (ERR_INTERNAL). */
  restart: (entry?: string) => Promise<RestartResult>
}

/** Listen on `<home>/holder.sock` (a stale socket file is replaced). Async; rejects when it cannot listen. */
export async function listenHolderControl (home: string, controls: HolderControls): Promise<Server> {
  const path = join(home, HOLDER_SOCKET)
  await rm(path, { force: true })
  const server = createServer(socket => serveControl(socket, controls))
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    const previous = process.umask(0o177)
    try { server.listen(path, () => { server.off('error', reject); resolve() }) } finally { process.umask(previous) }
  })
  await chmod(path, 0o600)
  return server
}

/** One connection: a line in, one answer out per line; a line over MAX_MESSAGE_BYTES ends the connection. */
function serveControl (socket: Socket, controls: HolderControls): void {
  let buffered = ''
  socket.setEncoding('utf8')
  socket.on('error', () => socket.destroy())
  socket.on('data', (chunk: string) => {
    buffered += chunk
    if (buffered.length > MAX_MESSAGE_BYTES) { socket.destroy(); return }
    let nl: number
    while ((nl = buffered.indexOf('\n')) !== -1) {
      const line = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 1)
      void answer(line, controls).then(r => { if (!socket.destroyed) socket.write(JSON.stringify(r) + '\n') })
    }
  })
}

async function answer (line: string, controls: HolderControls): Promise<unknown> {
  let req: { id?: unknown, method?: unknown, params?: { entry?: unknown } }
  try { req = JSON.parse(line) } catch { return { id: null, error: { code: 'ERR_USAGE', message: 'request is not valid JSON' } } }
  if (typeof req !== 'object' || req === null) return { id: null, error: { code: 'ERR_USAGE', message: 'request is not an object' } }
  const id = typeof req.id === 'number' ? req.id : null
  try {
    if (req.method === 'status') return { id, result: controls.status() }
    if (req.method === 'restart') {
      const entry = req.params?.entry
      if (entry !== undefined && typeof entry !== 'string') throw new HolderError('restart: entry must be a path')
      return { id, result: await controls.restart(entry) }
    }
    return { id, error: { code: 'ERR_USAGE', message: `unknown method ${JSON.stringify(req.method)}` } }
  } catch (err) {
    return { id, error: { code: err instanceof LayerdError ? err.code : 'ERR_INTERNAL', message: describeError(err) } }
  }
}
