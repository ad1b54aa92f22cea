/**
 * Attack 8: a lying store. Bytes in the store are modified after the push
 * (by an attacker with write access to the bucket, or by bit rot):
 *
 * - chunks, three ways: bytes flipped in place; a "plausible" frame (valid
 *   zstd of the right plain length, wrong content, padded with a zstd
 *   skippable frame so offsets still line up); a decompression bomb (a
 *   256 MiB frame in the chunk's ~11 KiB);
 * - a layer TOC object; the image manifest object.
 *
 * Every chunk is checked against its sha256 from the (verified) TOC after
 * decompressing into a buffer of the TOC's length, so a lying chunk is
 * never served: readers inside sandboxes and on the host get EIO, the
 * mount counts it (`corruptChunks`), and the next read fails again (nothing
 * bad was cached). A lying TOC or manifest fails verification before
 * anything is mounted: createSandbox rejects with CorruptObjectError
 * naming the object.
 *
 * Not detectable by design: a ref (NAME:TAG) repointed to another valid
 * manifest. Pin images by digest where that matters.
 *
 * May import: ./attack-harness.ts, src/, node built-ins.
 */
import { open, readdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { compress } from 'zstd-napi'
import { resolveChunk, type ChunkRef } from '../format/toc.js'
import { loadImage } from '../image/load-image.js'
import { openStore } from '../store/open-store.js'
import { ATTACK_IMAGE, MIB } from './attack-harness.js'

export type ChunkLie = 'flipped' | 'plausible' | 'bomb'

/** Which file's chunk each lie replaces (python's own sources, so `import json` meets them). */
export const LYING_FILES: Readonly<Record<ChunkLie, string>> = {
  flipped: 'usr/lib/python3.11/json/decoder.py',
  plausible: 'usr/lib/python3.11/json/scanner.py',
  bomb: 'usr/lib/python3.11/typing.py'
}
export const BOMB_PLAIN_BYTES = 256 * MIB

/** The chunks holding `path` in the top layer that has it. Async. */
export async function chunksOfFile (storeDir: string, path: string): Promise<ChunkRef[]> {
  const store = openStore(`file://${storeDir}`)
  try {
    const image = await loadImage(store, ATTACK_IMAGE)
    for (const toc of [...image.tocs].reverse()) {
      const entry = toc.entries.find(e => e.path === path)
      if (entry?.spans !== undefined) return [...new Set(entry.spans.map(s => s.chunk))].map(i => resolveChunk(toc, i))
    }
    throw new Error(`${path} has no content in ${ATTACK_IMAGE}`)
  } finally {
    await store.close()
  }
}

/** A zstd skippable frame of exactly `bytes` bytes (≥ 8): decoders step over it. */
function skippableFrame (bytes: number): Buffer {
  if (bytes < 8) throw new Error(`a skippable frame needs 8 bytes, ${bytes} left`)
  const f = Buffer.alloc(bytes)
  f.writeUInt32LE(0x184d2a50, 0)
  f.writeUInt32LE(bytes - 8, 4)
  return f
}

/** The bytes a lie puts in place of `ref`'s compressed bytes (same length). Sync. */
export function lyingBytes (lie: ChunkLie, original: Buffer, ref: ChunkRef): Buffer {
  switch (lie) {
    case 'flipped': return Buffer.from(original.map((b, i) => i % 97 === 13 ? b ^ 0xff : b))
    case 'plausible': {
      const frame = compress(Buffer.alloc(ref.length, 0x20), { compressionLevel: 19 })
      return Buffer.concat([frame, skippableFrame(ref.compressedLength - frame.length)])
    }
    case 'bomb': {
      const frame = compress(Buffer.alloc(BOMB_PLAIN_BYTES), { compressionLevel: 19 })
      return Buffer.concat([frame, skippableFrame(ref.compressedLength - frame.length)])
    }
  }
}

/** Overwrite the first chunk of {@link LYING_FILES}[lie] in the store's blob, in place. Async. */
export async function plantChunkLie (storeDir: string, lie: ChunkLie): Promise<ChunkRef> {
  const [ref] = await chunksOfFile(storeDir, LYING_FILES[lie])
  const fh = await open(join(storeDir, 'blobs', ref!.blob), 'r+')
  try {
    const original = Buffer.alloc(ref!.compressedLength)
    await fh.read(original, 0, original.length, ref!.offset)
    const lying = lyingBytes(lie, original, ref!)
    if (lying.length !== original.length) throw new Error(`lie ${lie} is ${lying.length} bytes for a ${original.length}-byte chunk`)
    await fh.write(lying, 0, lying.length, ref!.offset)
  } finally {
    await fh.close()
  }
  return ref!
}

/** Flip one byte in the middle of every object under `prefix` (`layers` or `manifests`). Async. */
export async function corruptObjects (storeDir: string, prefix: 'layers' | 'manifests'): Promise<string[]> {
  const names = await readdir(join(storeDir, prefix))
  for (const name of names) {
    const path = join(storeDir, prefix, name)
    const bytes = await readFile(path)
    bytes[bytes.length >> 1] = bytes[bytes.length >> 1]! ^ 0x01
    await writeFile(path, bytes)
  }
  return names
}

/** Peak resident memory (VmHWM) of a process, in bytes. Async. */
export async function peakRssBytes (pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8')
  return Number(/^VmHWM:\s+(\d+) kB$/m.exec(status)?.[1] ?? NaN) * 1024
}
