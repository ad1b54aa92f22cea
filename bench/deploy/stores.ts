/**
 * Set-up of the benchmark's image sources, done once and not timed:
 * - the Docker registry, each task image pushed with skopeo;
 * - the layerd fs store, each task image pushed with `layerctl push` (the
 *   base first, on its own, so the task images' own share can be read);
 * - the layerd S3 store (s3rver): the fs store's objects copied as they
 *   are through the project's S3 backend. Objects are content-addressed,
 *   so the S3 store is byte-identical to what a push to S3 writes; it saves
 *   K re-chunkings of the shared base (see the report's product notes).
 *
 * Also the dedup figures: the task images in the layerd store against the
 * sum of their Docker layer sizes.
 *
 * Bench-only: may import anything.
 */
import { spawn } from 'node:child_process'
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { startS3rver, type S3rverHandle } from '../../fixtures/s3rver.js'
import { digestHex } from '../../src/format/digest.js'
import { layerKey, manifestKey, refKey } from '../../src/format/keys.js'
import { parseRef } from '../../src/format/ref.js'
import { openStore } from '../../src/store/open-store.js'
import { LAYERCTL_JS } from '../bench-report.js'
import type { DeployCorpus } from './corpus.js'
import { LocalRegistry } from './local-registry.js'

export const BASE_REF = 'deploy/base:python3'
const S3_BUCKET = 'layerd-deploy'
const COPY_PARALLEL = 8

export interface PushRecord { ref: string, manifest: string, layers: Array<{ digest: string }>, uploadedBytes: number, seconds: number }

export interface DedupFigures {
  images: number
  /** Σ over the K images of all their layer sizes (gzip, as in the registry): what K separate image stores hold. */
  dockerLayerBytesSum: number
  /** Distinct layer blobs of the K images (the registry's own layer-level dedup: the base once). */
  dockerDistinctLayerBytes: number
  /** Σ of the K project layers alone (gzip). */
  dockerTaskLayerBytes: number
  /** Bytes in the layerd store holding the K images (base included): blobs, indexes, TOCs, manifests, refs. */
  layerdStoreBytes: number
  /** What the K task images added to a store that already held the base. */
  layerdTaskBytes: number
  /** dockerLayerBytesSum / layerdStoreBytes. */
  ratio: number
  /** dockerDistinctLayerBytes / layerdStoreBytes. */
  ratioVsDistinctLayers: number
  /** dockerTaskLayerBytes / layerdTaskBytes. */
  taskLayerRatio: number
  /** Uncompressed bytes of the K project trees. */
  projectPlainBytes: number
}

export interface ImageSources {
  registry: LocalRegistry
  s3rver: S3rverHandle
  fsStore: string
  s3Store: string
  pushes: PushRecord[]
  dedup: DedupFigures
  fsMetadataBytes: (refs: string[]) => Promise<number>
  stop: () => Promise<void>
}

/** Start and fill the registry and both stores under `work`. Async. */
export async function prepareImageSources (work: string, corpus: DeployCorpus, log: (line: string) => void): Promise<ImageSources> {
  const registry = await LocalRegistry.start(join(work, 'registry'))
  const s3rver = await startS3rver(join(work, 's3rver'), { bucket: S3_BUCKET })
  const stop = async (): Promise<void> => { await registry.stop(); await s3rver.stop() }
  try {
    const t0 = performance.now()
    for (const t of corpus.tasks) await registry.push(t.layout, t.ref)
    log(`registry: pushed ${corpus.tasks.length} images in ${((performance.now() - t0) / 1000).toFixed(1)} s`)

    const storeDir = join(work, 'store')
    const fsStore = pathToFileURL(storeDir).href
    const ciHome = join(work, 'ci-home')
    const pushes: PushRecord[] = []
    const push = async (layout: string, ref: string): Promise<PushRecord> => {
      const out = await layerctl(['push', layout, ref, '--json'], { LAYERD_HOME: ciHome, LAYERD_STORE: fsStore })
      const r = JSON.parse(out.trim().split('\n').at(-1)!) as PushRecord
      log(`layerd: pushed ${ref}: uploaded ${(r.uploadedBytes / 1e6).toFixed(2)} MB in ${r.seconds.toFixed(1)} s`)
      return r
    }
    await push(corpus.baseLayout, BASE_REF)
    const baseBytes = await treeBytes(storeDir)
    for (const t of corpus.tasks) pushes.push(await push(t.layout, t.ref))
    const storeBytes = await treeBytes(storeDir)

    const s3Store = `s3://${S3_BUCKET}/store`
    const copied = await copyStore(fsStore, s3Store, s3rver.endpoint)
    log(`layerd: copied ${copied} objects of the fs store to ${s3Store} (s3rver ${s3rver.endpoint})`)

    const dedup = dedupFigures(corpus, storeBytes, storeBytes - baseBytes)
    const byRef = new Map(pushes.map(p => [p.ref, p]))
    const fsMetadataBytes = async (refs: string[]): Promise<number> => {
      const keys = new Set<string>()
      for (const ref of refs) {
        const p = byRef.get(ref)
        if (p === undefined) throw new Error(`no push record for ${ref}`)
        keys.add(refKey(parseRef(ref)))
        keys.add(manifestKey(digestHex(p.manifest)))
        for (const l of p.layers) keys.add(layerKey(digestHex(l.digest)))
      }
      let bytes = 0
      for (const k of keys) bytes += (await stat(join(storeDir, k))).size
      return bytes
    }
    return { registry, s3rver, fsStore, s3Store, pushes, dedup, fsMetadataBytes, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

function dedupFigures (corpus: DeployCorpus, layerdStoreBytes: number, layerdTaskBytes: number): DedupFigures {
  const distinct = new Map<string, number>()
  let sum = 0
  let task = 0
  let plain = 0
  for (const t of corpus.tasks) {
    for (const l of t.layers) { sum += l.size; distinct.set(l.digest, l.size) }
    task += t.layers.at(-1)!.size
    plain += t.projectBytes
  }
  const dockerDistinctLayerBytes = [...distinct.values()].reduce((a, b) => a + b, 0)
  return {
    images: corpus.tasks.length,
    dockerLayerBytesSum: sum,
    dockerDistinctLayerBytes,
    dockerTaskLayerBytes: task,
    layerdStoreBytes,
    layerdTaskBytes,
    ratio: sum / layerdStoreBytes,
    ratioVsDistinctLayers: dockerDistinctLayerBytes / layerdStoreBytes,
    taskLayerRatio: task / layerdTaskBytes,
    projectPlainBytes: plain
  }
}

/** Apparent size of every file below `dir`. Async. */
async function treeBytes (dir: string): Promise<number> {
  let total = 0
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) total += (await stat(join(e.parentPath ?? (e as unknown as { path: string }).path, e.name))).size
  }
  return total
}

/** Copy every object of one store into another. Async; resolves with the object count. */
async function copyStore (from: string, to: string, s3Endpoint: string): Promise<number> {
  const src = openStore(from)
  const dst = openStore(to, { s3Endpoint })
  try {
    const keys: string[] = []
    for await (const k of src.list('')) keys.push(k)
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < keys.length) {
        const k = keys[next++]!
        await dst.put(k, await src.get(k))
      }
    }
    await Promise.all(Array.from({ length: COPY_PARALLEL }, worker))
    return keys.length
  } finally {
    await src.close()
    await dst.close()
  }
}

async function layerctl (args: string[], env: Record<string, string>): Promise<string> {
  return await new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [LAYERCTL_JS, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (c: Buffer) => { out += c.toString() })
    child.stderr.on('data', (c: Buffer) => { err += c.toString() })
    child.on('error', reject)
    child.on('close', code => code === 0 ? resolve(out) : reject(new Error(`layerctl ${args.join(' ')} failed (${code}): ${err.trim().slice(-800)}`)))
  })
}

