#!/usr/bin/env node
/**
 * layerd's runner: serves `layerctl run` for the C front (native/layerctl.c):
 * every connection of `<home>/run.sock` that layerd hands over
 * (src/cli/run-server.ts), concurrently, each with src/cli/run-connection.ts.
 * Started by layerd with an IPC channel; not for direct use.
 *
 *   node dist/layerd/runner.js --home DIR
 *
 * Ends its runs (destroying their sandboxes) and exits 0 on SIGTERM or
 * SIGINT, or when its IPC channel closes (layerd is gone). Exit 2: bad
 * flags, or not started by layerd.
 */
import { Socket } from 'node:net'
import { parseArgs } from 'node:util'
import { RunConnection } from '../src/cli/run-connection.js'
import type { RunnerMessage } from '../src/cli/run-server.js'

function main (): number | undefined {
  let home: string | undefined
  try { home = parseArgs({ options: { home: { type: 'string' } } }).values.home } catch {}
  const send = process.send?.bind(process)
  if (home === undefined || send === undefined) {
    console.error('layerd-runner: usage: started by layerd (src/cli/run-server.ts) as runner.js --home DIR, with an IPC channel')
    return 2
  }
  const log = (line: string): void => { send({ type: 'log', line } satisfies RunnerMessage) }
  const runs = new Set<RunConnection>()
  process.on('message', (m: RunnerMessage, handle: unknown) => {
    if (m.type !== 'run' || !(handle instanceof Socket)) return
    // Before reading a byte: layerd closes its copy of the connection on this (src/cli/run-server.ts).
    send({ type: 'took', id: m.id } satisfies RunnerMessage)
    const run = new RunConnection(handle, home, log)
    runs.add(run)
    void run.done.finally(() => runs.delete(run))
    handle.resume()
  })
  let stopping = false
  const stop = (): void => {
    if (stopping) return
    stopping = true
    for (const r of runs) r.callerGone()
    void Promise.all([...runs].map(async r => await r.done)).finally(() => process.exit(0))
  }
  process.on('disconnect', stop).on('SIGTERM', stop).on('SIGINT', stop)
  send({ type: 'ready' } satisfies RunnerMessage)
  return undefined
}

const code = main()
if (code !== undefined) process.exit(code)
