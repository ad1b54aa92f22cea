/** Worker thread body for ChunkingPool: a FileChunker per worker. */
import { parentPort, workerData } from 'node:worker_threads'
import { FileChunker, type ChunkingParams, type PieceBatch } from './file-chunking.js'

const params = workerData as ChunkingParams
// sqlite (better-sqlite3 and the state modules, ~7 ms per worker) is loaded only when there is an index to read.
const isStored = params.dedup === undefined
  ? undefined
  : (await import('../state/chunk-index-table.js')).openStoredChunkLookup(params.dedup.dbPath, params.dedup.storeUrl, params.dedup.excludeBlobs)
const chunker = new FileChunker(params, isStored)

parentPort!.on('message', (msg: { id: number, data: ArrayBuffer, length: number } & Omit<PieceBatch, 'data'>) => {
  const out = chunker.process({ data: new Uint8Array(msg.data, 0, msg.length), files: msg.files, ends: msg.ends, last: msg.last, paths: msg.paths })
  // The input buffer goes back with the result, for the pool to reuse (the chunker kept no view of it).
  parentPort!.postMessage({ id: msg.id, ...out, input: msg.data }, [out.data, msg.data])
})
