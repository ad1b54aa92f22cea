/**
 * A small client of containerd's own gRPC API (content, images, leases,
 * snapshots), as `layerctl containerd pull` uses it: every call carries
 * the namespace (`containerd-namespace`) and, once a lease is taken, the
 * lease (`containerd-lease`) that keeps what the pull writes from
 * containerd's GC until the image record references it.
 *
 * gRPC failures become LayerdErrors naming the call and containerd's
 * message; NOT_FOUND and ALREADY_EXISTS keep their meaning (NotFoundError,
 * AlreadyExistsError) so callers can branch on them.
 *
 * May import: src/errors.ts, @grpc/grpc-js, this folder.
 */
import * as grpc from '@grpc/grpc-js'
import { ContainerdError, DaemonUnavailableError, LayerdError, NotFoundError } from '../errors.js'
import { containerdService, type ContainerdService } from './containerd-protos.js'
import { AlreadyExistsError } from './snapshot-errors.js'

/** containerd's default socket. */
export { DEFAULT_CONTAINERD_ADDRESS } from './snapshotter-paths.js'
const CALL_TIMEOUT_MS = 120_000

export interface WireDescriptor { media_type: string, digest: string, size: number, annotations?: Record<string, string> }

export class ContainerdClient {
  readonly address: string
  readonly namespace: string
  #lease: string | undefined
  readonly #clients = new Map<ContainerdService, grpc.Client>()

  constructor (address: string, namespace: string) {
    this.address = address
    this.namespace = namespace
  }

  #client (name: ContainerdService): grpc.Client {
    let c = this.#clients.get(name)
    if (c === undefined) {
      c = new (containerdService(name).Client)(`unix://${this.address}`, grpc.credentials.createInsecure())
      this.#clients.set(name, c)
    }
    return c
  }

  #metadata (): grpc.Metadata {
    const md = new grpc.Metadata()
    md.set('containerd-namespace', this.namespace)
    if (this.#lease !== undefined) md.set('containerd-lease', this.#lease)
    return md
  }

  #fail (service: string, method: string, err: grpc.ServiceError): LayerdError {
    const what = `containerd ${service}.${method} at ${this.address}: ${err.details || err.message}`
    if (err.code === grpc.status.NOT_FOUND) return new NotFoundError(what, { cause: err })
    if (err.code === grpc.status.ALREADY_EXISTS) return new AlreadyExistsError(what, { cause: err })
    if (err.code === grpc.status.UNAVAILABLE) return new DaemonUnavailableError(`containerd does not answer at ${this.address}: ${err.details || err.message}`, { cause: err })
    return new ContainerdError(what, { cause: err })
  }

  /** One unary call. Async; throws as described in the module doc. */
  async call<T = any>(service: ContainerdService, method: string, request: unknown): Promise<T> {
    const client = this.#client(service) as any
    return await new Promise<T>((resolve, reject) => {
      client[method](request, this.#metadata(), { deadline: Date.now() + CALL_TIMEOUT_MS }, (err: grpc.ServiceError | null, value: T) => {
        if (err !== null) reject(this.#fail(service, method, err))
        else resolve(value)
      })
    })
  }

  /** Take a lease that expires by itself after `expireMs` (a pull that dies leaves nothing pinned for long); later calls carry it. Async. */
  async takeLease (id: string, expireMs: number): Promise<void> {
    await this.call('leases', 'Create', { id, labels: { 'containerd.io/gc.expire': new Date(Date.now() + expireMs).toISOString() } })
    this.#lease = id
  }

  /** Drop the lease taken by takeLease(). Async; idempotent. */
  async releaseLease (): Promise<void> {
    const id = this.#lease
    if (id === undefined) return
    this.#lease = undefined
    await this.call('leases', 'Delete', { id, sync: false })
  }

  /**
   * Write `bytes` as content `digest` with `labels`, committed in one
   * message; content containerd already has gets the labels added. Async.
   */
  async writeContent (digest: string, bytes: Buffer, labels: Record<string, string>): Promise<void> {
    const client = this.#client('content') as any
    try {
      await new Promise<void>((resolve, reject) => {
        const stream = client.Write(this.#metadata(), { deadline: Date.now() + CALL_TIMEOUT_MS })
        let answered = false
        stream.on('data', (r: { action: string, digest: string }) => {
          if (r.action === 'COMMIT') { answered = true; stream.end() }
        })
        stream.on('error', (err: grpc.ServiceError) => reject(this.#fail('content', 'Write', err)))
        stream.on('end', () => { answered ? resolve() : reject(new ContainerdError(`containerd content.Write of ${digest} at ${this.address} ended without a commit`)) })
        stream.write({ action: 'COMMIT', ref: `layerctl-${digest}`, total: bytes.length, expected: digest, offset: 0, data: bytes, labels })
      })
    } catch (err) {
      if (!(err instanceof AlreadyExistsError)) throw err
      await this.call('content', 'Update', { info: { digest, labels }, update_mask: { paths: Object.keys(labels).map(k => `labels.${k}`) } })
    }
  }

  /** Close every channel. Sync; idempotent. */
  close (): void {
    for (const c of this.#clients.values()) c.close()
    this.#clients.clear()
  }
}
