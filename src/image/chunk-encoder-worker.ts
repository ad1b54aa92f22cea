/**
 * Worker thread body for ChunkEncoderPool: sha256 + zstd of a batch of
 * chunks. Messages: { id, data: ArrayBuffer, length, ends: number[] } in,
 * { id, digests: string[], data: ArrayBuffer, ends: number[] } out.
 */
import { parentPort, workerData } from 'node:worker_threads'
import { encodeBatch } from './chunk-encoding.js'

const level = (workerData as { level: number }).level

parentPort!.on('message', (msg: { id: number, data: ArrayBuffer, length: number, ends: number[] }) => {
  const out = encodeBatch(new Uint8Array(msg.data, 0, msg.length), msg.ends, level)
  parentPort!.postMessage({ id: msg.id, ...out }, [out.data])
})
