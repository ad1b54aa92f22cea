/** Worker thread body for StreamHash: one sha256 per open hash id; staging buffers go back for reuse. */
import { createHash, type Hash } from 'node:crypto'
import { parentPort } from 'node:worker_threads'
import type { HashReply, HashRequest } from './stream-hash.js'

const hashes = new Map<number, Hash>()
const reply = (msg: HashReply, transfer: ArrayBuffer[] = []): void => parentPort!.postMessage(msg, transfer)

parentPort!.on('message', (msg: HashRequest) => {
  if ('bytes' in msg) {
    let h = hashes.get(msg.id)
    if (h === undefined) { h = createHash('sha256'); hashes.set(msg.id, h) }
    h.update(new Uint8Array(msg.bytes, 0, msg.length))
    reply({ spare: msg.bytes }, [msg.bytes])
  } else if ('end' in msg) {
    const hex = (hashes.get(msg.id) ?? createHash('sha256')).digest('hex')
    hashes.delete(msg.id)
    reply({ id: msg.id, hex })
  } else {
    hashes.delete(msg.id)
  }
})
