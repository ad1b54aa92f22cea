/**
 * containerd's `containerd.services.snapshots.v1.Snapshots` gRPC service
 * over a LayerdSnapshotter. It serves connections accepted on a unix socket
 * elsewhere (on-demand-socket.ts binds it, 0600, before this module and
 * gRPC are loaded), through grpc-js's connection injector; containerd's
 * proxy plugin dials that socket.
 *
 * Errors become the gRPC statuses containerd maps back to its errdefs:
 * NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, INVALID_ARGUMENT; any
 * other failure is UNKNOWN with its one-line message. No request can take
 * the daemon down: every handler catches.
 *
 * May import: src/errors.ts, @grpc/grpc-js, this folder.
 */
import type { Socket } from 'node:net'
import * as grpc from '@grpc/grpc-js'
import { LayerdError, NotFoundError, describeError } from '../errors.js'
import { containerdService } from './containerd-protos.js'
import type { LayerdSnapshotter, SnapshotInfo, SnapshotMount } from './layerd-snapshotter.js'
import type { SocketHandler } from './on-demand-socket.js'
import { AlreadyExistsError, FailedPreconditionError, InvalidArgumentError } from './snapshot-errors.js'
import type { LogLine } from '../log-line.js'

/** Infos per List message: containerd's own service batches by size; 100 keeps a message well under the 4 MiB limit with 4 KiB labels. */
const LIST_BATCH = 100

const STATUS_OF: Record<string, grpc.status> = {
  [NotFoundError.code]: grpc.status.NOT_FOUND,
  [AlreadyExistsError.code]: grpc.status.ALREADY_EXISTS,
  [FailedPreconditionError.code]: grpc.status.FAILED_PRECONDITION,
  [InvalidArgumentError.code]: grpc.status.INVALID_ARGUMENT
}

function toStatus (err: unknown): Partial<grpc.ServiceError> {
  const code = err instanceof LayerdError ? STATUS_OF[err.code] ?? grpc.status.UNKNOWN : grpc.status.UNKNOWN
  return { code, details: describeError(err), message: describeError(err) }
}

interface Timestamp { seconds: number, nanos: number }
function timestamp (d: Date): Timestamp {
  const ms = d.getTime()
  return { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1_000_000 }
}

const KIND_NAME = { active: 'ACTIVE', view: 'VIEW', committed: 'COMMITTED' } as const

function wireInfo (i: SnapshotInfo): unknown {
  return { name: i.name, parent: i.parent, kind: KIND_NAME[i.kind], created_at: timestamp(i.createdAt), updated_at: timestamp(i.updatedAt), labels: i.labels }
}

function wireMounts (mounts: SnapshotMount[]): unknown {
  return { mounts: mounts.map(m => ({ type: m.type, source: m.source, target: m.target, options: m.options })) }
}

type Unary = (call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) => void

/** A unary handler: `fn`'s result or its error as a status; a failure is logged unless it is one containerd expects. */
function unary (log: LogLine, name: string, fn: (req: any) => Promise<unknown> | unknown): Unary {
  return (call, callback) => {
    Promise.resolve().then(async () => await fn(call.request)).then(
      value => callback(null, value ?? {}),
      err => {
        const status = toStatus(err)
        if (status.code === grpc.status.UNKNOWN) log(`snapshots ${name}: ${describeError(err)}`, 'warn')
        callback(status, null)
      })
  }
}

export class SnapshotsGrpcServer implements SocketHandler {
  readonly #server = new grpc.Server()
  #injector: ReturnType<grpc.Server['createConnectionInjector']> | undefined
  #closed = false

  constructor (snapshotter: LayerdSnapshotter, log: LogLine) {
    const s = snapshotter
    const labelsOf = (req: { labels?: Record<string, string> }): Record<string, string> => ({ ...(req.labels ?? {}) })
    this.#server.addService(containerdService('snapshots').definition, {
      Prepare: unary(log, 'Prepare', async req => wireMounts(await s.prepare(req.key, req.parent, labelsOf(req)))),
      View: unary(log, 'View', async req => wireMounts(await s.view(req.key, req.parent, labelsOf(req)))),
      Mounts: unary(log, 'Mounts', async req => wireMounts(await s.mounts(req.key))),
      Commit: unary(log, 'Commit', req => { s.commit(req.name, req.key, labelsOf(req)) }),
      Remove: unary(log, 'Remove', async req => { await s.remove(req.key) }),
      Stat: unary(log, 'Stat', req => ({ info: wireInfo(s.stat(req.key)) })),
      Update: unary(log, 'Update', req => {
        if (req.info === null || req.info === undefined) throw new InvalidArgumentError('Update without info')
        return { info: wireInfo(s.update({ name: req.info.name, labels: labelsOf(req.info) }, req.update_mask?.paths ?? [])) }
      }),
      Usage: unary(log, 'Usage', async req => await s.usage(req.key)),
      Cleanup: unary(log, 'Cleanup', async () => { await s.cleanup() }),
      List: (call: grpc.ServerWritableStream<any, any>) => {
        try {
          const infos = s.list(call.request.filters ?? [])
          for (let i = 0; i < infos.length; i += LIST_BATCH) call.write({ info: infos.slice(i, i + LIST_BATCH).map(wireInfo) })
          call.end()
        } catch (err) {
          call.destroy(Object.assign(new Error(describeError(err)), toStatus(err)))
        }
      }
    })
  }

  /** Serve one accepted, paused connection (not yet read from: grpc-js's http2 server takes it over, then it is resumed). Sync; a closed server destroys it. */
  take (socket: Socket): void {
    if (this.#closed) { socket.destroy(); return }
    this.#injector ??= this.#server.createConnectionInjector(grpc.ServerCredentials.createInsecure())
    this.#injector.injectConnection(socket)
    // Accepted paused (pauseOnConnect): the http2 session now reads from the socket's handle; start those reads.
    socket.resume()
  }

  /** Stop serving (in-flight calls and open connections are cut). Async; idempotent. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#injector?.destroy()
    this.#server.forceShutdown()
  }
}
