/**
 * One per-task image of the deploy corpus: the shared base image (an OCI
 * layout) plus one layer holding a project tree at /work/project, taken
 * from an npm release tarball. Written as an OCI image layout whose base
 * blobs are hard links to the base layout's (same digests, so the registry
 * and docker share them, as they would for images built FROM one base).
 *
 * Deterministic: the same tarball and base give the same digests.
 *
 * Bench-only: may import fixtures/ (layer-dsl, oci-layout), tar-stream, node built-ins.
 */
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { copyFile, link, mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { createGunzip, gzipSync } from 'node:zlib'
import { extract } from 'tar-stream'
import { buildLayerTar, dir, file, type TarEntrySpec } from '../../fixtures/layer-dsl.js'
import { LAYER_MEDIA_TYPES, OCI_CONFIG_MEDIA_TYPE, OCI_MANIFEST_MEDIA_TYPE } from '../../fixtures/oci-layout.js'

/** Where the project lives in every task image (and the task's working directory). */
export const PROJECT_DIR = 'work/project'
const FIXED_CREATED = '2024-01-01T00:00:00Z'

export interface ProjectTree {
  entries: TarEntrySpec[]
  files: number
  bytes: number
}

/**
 * The files of an npm tarball as layer entries below `PROJECT_DIR` (the
 * tarball's top directory, normally `package/`, is replaced), with every
 * parent directory spelled out. Async; rejects on a corrupt tarball or an
 * entry that would leave the project directory.
 */
export async function projectTree (tgz: string): Promise<ProjectTree> {
  const files = new Map<string, { data: Buffer, mode: number, mtime: number }>()
  const ex = extract()
  ex.on('entry', (header, stream, next) => {
    const parts = header.name.split('/').filter(p => p !== '' && p !== '.')
    const rel = parts.slice(1)
    if (rel.some(p => p === '..')) { stream.resume(); next(new Error(`${tgz}: entry ${JSON.stringify(header.name)} leaves the package`)); return }
    const chunks: Buffer[] = []
    stream.on('data', (c: unknown) => { chunks.push(c as Buffer) })
    stream.on('end', () => {
      if (header.type === 'file' && rel.length > 0) {
        files.set(rel.join('/'), { data: Buffer.concat(chunks), mode: ((header.mode ?? 0o644) & 0o777) | 0o644, mtime: Math.floor((header.mtime?.getTime() ?? 0) / 1000) })
      }
      next()
    })
  })
  await pipeline(createReadStream(tgz), createGunzip(), ex)
  const dirs = new Set<string>(['work', PROJECT_DIR])
  const paths = [...files.keys()].sort()
  for (const p of paths) {
    const parts = p.split('/')
    for (let i = 1; i < parts.length; i++) dirs.add(`${PROJECT_DIR}/${parts.slice(0, i).join('/')}`)
  }
  const entries: TarEntrySpec[] = [...dirs].sort().map(d => dir(d))
  let bytes = 0
  for (const p of paths) {
    const f = files.get(p)!
    bytes += f.data.length
    entries.push(file(`${PROJECT_DIR}/${p}`, f.data, { mode: f.mode, mtime: f.mtime }))
  }
  return { entries, files: paths.length, bytes }
}

export interface LayerBlob { digest: string, size: number, diffId: string, mediaType: string }

export interface TaskLayout {
  dir: string
  manifestDigest: string
  /** All layers, base first; the last is the project layer. */
  layers: LayerBlob[]
}

interface OciManifest { config: { digest: string }, layers: Array<{ digest: string, size: number, mediaType: string }> }
interface OciConfig { config: Record<string, unknown>, rootfs: { type?: string, diff_ids: string[] }, history?: unknown[], [k: string]: unknown }

const sha256 = (data: Uint8Array): string => `sha256:${createHash('sha256').update(data).digest('hex')}`
const blobPath = (layout: string, digest: string): string => join(layout, 'blobs', ...digest.split(':'))

/** The single image of an OCI layout: its manifest and config. Async. */
export async function readLayoutImage (layout: string): Promise<{ manifest: OciManifest, config: OciConfig, manifestDigest: string }> {
  const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as { manifests: Array<{ digest: string }> }
  const manifestDigest = index.manifests[0]!.digest
  const manifest = JSON.parse(await readFile(blobPath(layout, manifestDigest), 'utf8')) as OciManifest
  const config = JSON.parse(await readFile(blobPath(layout, manifest.config.digest), 'utf8')) as OciConfig
  return { manifest, config, manifestDigest }
}

/**
 * Write `dir` as an OCI layout (tag 'latest') of `baseLayout`'s image plus
 * `tree` as one gzip layer; the config's WorkingDir becomes /work/project
 * and `label` goes into its labels. Async.
 */
export async function writeTaskLayout (dir: string, baseLayout: string, tree: ProjectTree, label: string): Promise<TaskLayout> {
  const base = await readLayoutImage(baseLayout)
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true })
  const layers: LayerBlob[] = []
  for (const [i, l] of base.manifest.layers.entries()) {
    const to = blobPath(dir, l.digest)
    await link(blobPath(baseLayout, l.digest), to).catch(async () => { await copyFile(blobPath(baseLayout, l.digest), to) })
    layers.push({ digest: l.digest, size: l.size, mediaType: l.mediaType, diffId: base.config.rootfs.diff_ids[i]! })
  }
  const tar = buildLayerTar(tree.entries)
  const gz = gzipSync(tar)
  const layer: LayerBlob = { digest: sha256(gz), size: gz.length, diffId: sha256(tar), mediaType: LAYER_MEDIA_TYPES.gzip }
  await writeFile(blobPath(dir, layer.digest), gz)
  layers.push(layer)
  const config: OciConfig = {
    ...base.config,
    created: FIXED_CREATED,
    config: {
      ...base.config.config,
      WorkingDir: `/${PROJECT_DIR}`,
      Labels: { ...(base.config.config.Labels as Record<string, string> | undefined), 'org.layerd.deploy-task': label }
    },
    rootfs: { type: 'layers', diff_ids: layers.map(l => l.diffId) },
    history: [...(base.config.history ?? []), { created: FIXED_CREATED, created_by: `COPY ${label} /${PROJECT_DIR}` }]
  }
  const configBytes = Buffer.from(JSON.stringify(config))
  const configDigest = sha256(configBytes)
  await writeFile(blobPath(dir, configDigest), configBytes)
  const manifestBytes = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType: OCI_MANIFEST_MEDIA_TYPE,
    config: { mediaType: OCI_CONFIG_MEDIA_TYPE, digest: configDigest, size: configBytes.length },
    layers: layers.map(l => ({ mediaType: l.mediaType, digest: l.digest, size: l.size }))
  }))
  const manifestDigest = sha256(manifestBytes)
  await writeFile(blobPath(dir, manifestDigest), manifestBytes)
  await writeFile(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }))
  await writeFile(join(dir, 'index.json'), JSON.stringify({
    schemaVersion: 2,
    manifests: [{ mediaType: OCI_MANIFEST_MEDIA_TYPE, digest: manifestDigest, size: manifestBytes.length, annotations: { 'org.opencontainers.image.ref.name': 'latest' } }]
  }))
  return { dir, manifestDigest, layers }
}
