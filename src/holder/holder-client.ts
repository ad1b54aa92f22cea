/**
 * The client of the holder's control socket (`<home>/holder.sock`, JSON
 * lines; holder.ts): `status` and `restart`, for `layerctl daemon`.
 *
 * May import: src/errors.ts, ./holder.ts (types), ./fd-store-protocol.ts.
 */
import { createConnection } from 'node:net'
import { join } from 'node:path'
import { DaemonUnavailableError, errorFromWire } from '../errors.js'
import { HOLDER_SOCKET } from './fd-store-protocol.js'
import type { HolderStatus, RestartResult } from './holder-control-server.js'

interface HolderMethods { status: HolderStatus, restart: RestartResult }

/**
 * One request to the holder of `home`. Async; rejects with
 * DaemonUnavailableError when no holder answers, and with the holder's
 * error (its code kept) when it refuses. `timeoutMs` bounds the answer.
 */
export async function callHolder<M extends keyof HolderMethods> (home: string, method: M, params: Record<string, unknown> = {}, timeoutMs = 60_000): Promise<HolderMethods[M]> {
  const path = join(home, HOLDER_SOCKET)
  return await new Promise((resolve, reject) => {
    const socket = createConnection(path)
    let buffered = ''
    const timer = setTimeout(() => { socket.destroy(); reject(new DaemonUnavailableError(`the layerd holder at ${path} did not answer ${method} within ${timeoutMs} ms`)) }, timeoutMs)
    socket.setEncoding('utf8')
    socket.on('error', err => { clearTimeout(timer); reject(new DaemonUnavailableError(`no layerd holder runs for ${home} (${path}: ${(err as NodeJS.ErrnoException).code ?? err.message})`, { cause: err })) })
    socket.on('connect', () => socket.write(JSON.stringify({ id: 1, method, params }) + '\n'))
    socket.on('data', (chunk: string) => {
      buffered += chunk
      const nl = buffered.indexOf('\n')
      if (nl === -1) return
      clearTimeout(timer)
      socket.destroy()
      try {
        const r = JSON.parse(buffered.slice(0, nl)) as { result?: HolderMethods[M], error?: { code: string, message: string } }
        if (r.error !== undefined) reject(errorFromWire(r.error.code, r.error.message))
        else resolve(r.result as HolderMethods[M])
      } catch (err) {
        reject(new DaemonUnavailableError(`the layerd holder at ${path} sent a bad answer`, { cause: err }))
      }
    })
  })
}
