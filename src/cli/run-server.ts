/**
 * layerd's run socket (`<home>/run.sock`, mode 0600): `layerctl run` without
 * a Node process per call (issue 17). The C front of layerctl
 * (native/layerctl.c) connects; layerd accepts, and hands every connection
 * over to one runner process (layerd/runner.ts, serving each with
 * run-connection.ts), which it starts on the first connection. The socket's
 * fd is passed over the runner's IPC channel with an id; layerd keeps its own
 * copy until the runner answers `took` with that id, then closes it. So a
 * runner that dies (or wedges) before it took a connection cannot leave the
 * client waiting: layerd still holds the connection, and hands it to a new
 * runner once, or closes it (the client sees EOF). Node's own hand-over
 * (without keepOpen) detaches the socket at send and closes it only on the
 * child's internal ack; a child killed before that ack left the fd open in
 * layerd for ever, and the client hung (seen once in a full-suite run).
 *
 * Why a process of its own, not layerd's event loop: a run makes two mounts
 * and unmounts them with synchronous mount(2)/umount2 calls and spawns
 * bwrap or runc, which blocked layerd's event loop for ~43 ms a sandbox
 * (profiled: set-up 17, removal 13, spawn 13, where a fork of layerd, with
 * its lmdb map and FUSE threads, costs more than one of a small process);
 * every control call and FUSE reply would wait behind them. The runner holds
 * the CLI's and the runtimes' code, which an idle layerd does not load
 * (issue 14).
 *
 * Lifetime: the runner lives while layerd serves; one that dies is started
 * again for the next connection (a connection it took and had not yet
 * answered is lost: its client reports exit 125; one it had not yet taken
 * goes to the new runner). close() stops it with
 * SIGTERM (its runs in flight are ended, their sandboxes destroyed) and
 * waits; a runner whose layerd is gone (killed) sees its IPC channel close
 * and does the same.
 *
 * May import: this folder.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { chmod, rm } from 'node:fs/promises'
import { createServer, type Server, type Socket } from 'node:net'
import { fileURLToPath } from 'node:url'
import { runSocketPath } from './run-protocol.js'
import type { LogLine } from '../log-line.js'

/**
 * Connections layerd itself holds at once (those waiting for the runner to start); more are closed on
 * accept. Once handed over, a connection is the runner's: like as many layerctl processes, runs are not capped.
 */
export const MAX_RUN_CONNECTIONS = 256
/** The compiled runner entry (dist/layerd/runner.js), relative to this module (dist/src/cli/). */
export const RUNNER_ENTRY = fileURLToPath(new URL('../../layerd/runner.js', import.meta.url))
/** How long a stopping runner gets to end its runs before SIGKILL. */
const RUNNER_STOP_TIMEOUT_MS = 30_000
const RUNNER_START_TIMEOUT_MS = 30_000
/** A hand-over the runner's channel has not taken in this long means the runner is wedged or dying: the connection is dropped and the runner replaced. */
const HAND_OVER_TIMEOUT_MS = 10_000

/** Messages over the runner's IPC channel. */
export type RunnerMessage = { type: 'ready' } | { type: 'log', line: string } | { type: 'run', id: number } | { type: 'took', id: number }

export interface RunServer {
  readonly path: string
  /** Stop accepting, stop the runner (ending its runs, destroying their sandboxes) and wait for it. Idempotent. */
  close: () => Promise<void>
}

interface Runner {
  child: ChildProcess
  ready: Promise<void>
  exited: Promise<void>
  /** Hand-overs waiting for the runner's `took`, by id: settled by it, or rejected when the runner exits. */
  took: Map<number, { resolve: () => void, reject: (err: Error) => void }>
}

/** Listen on `<home>/run.sock` (replacing a stale socket file: the caller holds the home's lock). Async. */
export async function startRunServer (opts: { home: string, log: LogLine }): Promise<RunServer> {
  const path = runSocketPath(opts.home)
  const { log } = opts
  let runner: Runner | undefined
  let closing: Promise<void> | undefined
  let nextId = 0
  const startRunner = (): Runner => {
    const took: Runner['took'] = new Map()
    const child = spawn(process.execPath, [RUNNER_ENTRY, '--home', opts.home], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    const exited = new Promise<void>(resolve => child.once('exit', (code, signal) => {
      if (closing === undefined) log(`run socket: the runner (pid ${child.pid ?? '?'}) exited with ${signal ?? code}; the next run starts another`, 'warn')
      if (runner?.child === child) runner = undefined
      for (const waiting of took.values()) waiting.reject(new Error(`the runner (pid ${child.pid ?? '?'}) exited before it took the connection`))
      resolve()
    }))
    child.once('disconnect', () => { if (runner?.child === child) runner = undefined })
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`the runner did not start within ${RUNNER_START_TIMEOUT_MS} ms`)) }, RUNNER_START_TIMEOUT_MS)
      child.on('message', (m: RunnerMessage) => {
        if (m.type === 'ready') { clearTimeout(timer); resolve() } else if (m.type === 'log') { log(`runner: ${m.line}`) } else if (m.type === 'took') { took.get(m.id)?.resolve() }
      })
      void exited.then(() => { clearTimeout(timer); reject(new Error('the runner exited while starting')) })
      child.once('error', err => { clearTimeout(timer); reject(err) })
    })
    ready.catch(() => {})
    return { child, ready, exited, took }
  }
  // A runner killed a moment ago can still be `runner` (its exit not yet seen): its channel says so first.
  const liveRunner = (): Runner => {
    if (runner !== undefined && !runner.child.connected) runner = undefined
    return (runner ??= startRunner())
  }
  /** Resolves once the runner took `socket` (its `took`); rejects when it exits first, or takes longer than HAND_OVER_TIMEOUT_MS (it is killed). The socket stays ours until then. */
  const sendTo = async (r: Runner, socket: Socket): Promise<void> => {
    await r.ready
    const id = nextId++
    let timer: NodeJS.Timeout | undefined
    try {
      await new Promise<void>((resolve, reject) => {
        r.took.set(id, { resolve, reject })
        timer = setTimeout(() => {
          r.child.kill('SIGKILL')
          reject(new Error(`the runner (pid ${r.child.pid ?? '?'}) did not take the connection within ${HAND_OVER_TIMEOUT_MS} ms; it was killed`))
        }, HAND_OVER_TIMEOUT_MS)
        r.child.send({ type: 'run', id } satisfies RunnerMessage, socket, { keepOpen: true }, err => { if (err !== null) reject(err) })
      })
    } finally {
      clearTimeout(timer)
      r.took.delete(id)
    }
  }
  const handOver = async (socket: Socket): Promise<void> => {
    socket.on('error', () => socket.destroy())
    try {
      if (closing !== undefined) throw new Error('layerd is stopping')
      const r = liveRunner()
      try {
        await sendTo(r, socket)
      } catch (err) {
        // The runner did not take it: it died (perhaps killed a moment ago, its exit not yet seen: the send fails), or was
        // killed for taking too long. The connection is still ours: one more try, with a new runner.
        if (closing !== undefined || socket.destroyed) throw err
        log(`run socket: ${(err as Error).message}; handing the connection to a new runner`, 'warn')
        if (runner === r) {
          runner = undefined
          if (r.child.connected) r.child.kill('SIGTERM')
        }
        await sendTo(liveRunner(), socket)
      }
    } catch (err) {
      log(`run socket: cannot hand a connection to the runner: ${(err as Error).message}`, 'warn')
    } finally {
      // The runner has its own copy of the connection now, or nobody serves it: either way layerd's goes.
      socket.destroy()
    }
  }
  await rm(path, { force: true })
  // pauseOnConnect: layerd reads nothing of a connection; the runner reads the request.
  const server: Server = createServer({ pauseOnConnect: true }, socket => { void handOver(socket) })
  server.maxConnections = MAX_RUN_CONNECTIONS
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    const previous = process.umask(0o177)
    try { server.listen(path, () => { server.off('error', reject); resolve() }) } finally { process.umask(previous) }
  })
  server.on('error', err => log(`run socket ${path}: ${err.message}`, 'warn'))
  await chmod(path, 0o600)
  return {
    path,
    close: async () => {
      closing ??= (async () => {
        const closed = new Promise<void>(resolve => server.close(() => resolve()))
        const r = runner
        if (r !== undefined) {
          r.child.kill('SIGTERM')
          const timer = setTimeout(() => r.child.kill('SIGKILL'), RUNNER_STOP_TIMEOUT_MS)
          await r.exited
          clearTimeout(timer)
        }
        await closed
        await rm(path, { force: true })
      })()
      await closing
    }
  }
}
