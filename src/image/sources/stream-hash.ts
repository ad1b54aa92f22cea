/**
 * StreamHash: sha256 over a byte stream, computed on a worker thread when
 * the stream is big. Push's main thread is its bottleneck on tar inputs (it
 * runs both tar readers, the policy and the batching); taking the layer's
 * diff_id hash off it made a docker-archive push of the python image about
 * 10% faster (bench/push-throughput.ts). The caller pays one memcpy per
 * byte: bytes are copied into 1 MiB staging buffers that are transferred to
 * the worker and come back for reuse.
 *
 * One worker serves every hash of the process (a layer's blob and diff_id
 * hashes run at the same time); it is started on first use and does not
 * keep the process alive while no digest is awaited.
 *
 * May import: node built-ins.
 */
import { createHash, type Hash } from 'node:crypto'
import { Worker } from 'node:worker_threads'

export interface StreamHash {
  /** Add bytes. Sync; `chunk` may be reused as soon as this returns. */
  update: (chunk: Uint8Array) => void
  /** The sha256 of everything added, as 64 hex digits. Async; call once. */
  digest: () => Promise<string>
  /** Forget this hash (the stream was abandoned). Idempotent. */
  drop: () => void
}

/** Streams shorter than this are hashed inline: a worker round trip costs more than it saves. */
export const OFF_THREAD_MIN_BYTES = 16 * 1024 * 1024
const STAGING_BYTES = 1024 * 1024

/** A sha256 of a stream of about `expectedBytes` (unknown: inline). */
export function streamHash (expectedBytes: number | undefined): StreamHash {
  return expectedBytes !== undefined && expectedBytes >= OFF_THREAD_MIN_BYTES ? HashWorker.shared().open() : inlineHash()
}

function inlineHash (): StreamHash {
  const hash: Hash = createHash('sha256')
  return { update: chunk => { hash.update(chunk) }, digest: async () => hash.digest('hex'), drop: () => {} }
}

/** Messages to the worker: bytes for hash `id`, its end (reply: the digest), or its removal. */
export type HashRequest = { id: number, bytes: ArrayBuffer, length: number } | { id: number, end: true } | { id: number, drop: true }
/** Replies: a staging buffer handed back, or a digest. */
export type HashReply = { spare: ArrayBuffer } | { id: number, hex: string }

class HashWorker {
  static #instance: HashWorker | undefined
  readonly #worker: Worker
  readonly #waiting = new Map<number, { resolve: (hex: string) => void, reject: (err: Error) => void }>()
  readonly #spare: ArrayBuffer[] = []
  #nextId = 0
  #failure: Error | undefined

  static shared (): HashWorker {
    return (HashWorker.#instance ??= new HashWorker())
  }

  private constructor () {
    this.#worker = new Worker(new URL('./stream-hash-worker.js', import.meta.url))
    this.#worker.unref()
    this.#worker.on('message', (msg: HashReply) => {
      if ('spare' in msg) { this.#spare.push(msg.spare); return }
      const w = this.#waiting.get(msg.id)
      this.#waiting.delete(msg.id)
      if (this.#waiting.size === 0) this.#worker.unref()
      w?.resolve(msg.hex)
    })
    this.#worker.on('error', err => this.#fail(err))
    this.#worker.on('exit', code => this.#fail(new Error(`sha256 worker exited (code ${code})`)))
  }

  open (): StreamHash {
    const id = this.#nextId++
    let staging: Uint8Array | undefined
    let filled = 0
    let done = false
    const post = (msg: HashRequest, transfer: ArrayBuffer[] = []): void => { if (this.#failure === undefined) this.#worker.postMessage(msg, transfer) }
    const send = (): void => {
      if (staging === undefined || filled === 0) return
      post({ id, bytes: staging.buffer as ArrayBuffer, length: filled }, [staging.buffer as ArrayBuffer])
      staging = undefined
      filled = 0
    }
    return {
      update: chunk => {
        for (let at = 0; at < chunk.length;) {
          staging ??= new Uint8Array(this.#spare.pop() ?? new ArrayBuffer(STAGING_BYTES))
          const n = Math.min(chunk.length - at, staging.length - filled)
          staging.set(chunk.subarray(at, at + n), filled)
          filled += n
          at += n
          if (filled === staging.length) send()
        }
      },
      digest: async () => {
        if (done) throw new Error('internal: StreamHash.digest() called twice')
        done = true
        send()
        if (this.#failure !== undefined) throw this.#failure
        const hex = new Promise<string>((resolve, reject) => this.#waiting.set(id, { resolve, reject }))
        this.#worker.ref() // a digest is awaited: the process must wait for it
        post({ id, end: true })
        return await hex
      },
      drop: () => {
        if (done) return
        done = true
        post({ id, drop: true })
      }
    }
  }

  #fail (err: Error): void {
    this.#failure ??= err
    for (const w of this.#waiting.values()) w.reject(err)
    this.#waiting.clear()
    if (HashWorker.#instance === this) HashWorker.#instance = undefined
  }
}
