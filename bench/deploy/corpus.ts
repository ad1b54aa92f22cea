/**
 * The SWE-style corpus of the deploy benchmark, built once and cached
 * outside the repository (`$LAYERD_FIXTURES_DIR/deploy-corpus-v<N>`, next to
 * the Debian fixture images):
 *
 *   base       the Debian bookworm minbase + python3 fixture (python-v1)
 *   task image base + /work/project = one npm release (npm-projects.ts),
 *              one OCI layout per release in images/<package>-<version>/
 *   task       what a container runs: tasks.ts
 *
 * Reruns with the same or a smaller K need no network. A build holds the
 * corpus lock, and each image is built in a `.building-*` directory and
 * renamed into place, so a killed build leaves no half image.
 *
 * Bench-only: may import fixtures/ and the modules of this folder.
 */
import { access, mkdir, readFile, rename, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDebianImages } from '../../fixtures/debian-images.js'
import { BUILDING_PREFIX, acquireLock, fixturesDir, removeBuildDir, removeStaleBuilds } from '../../fixtures/fixture-cache.js'
import { fetchRelease, planReleases, projectVersions, type ProjectRelease } from './npm-projects.js'
import { type LayerBlob, projectTree, writeTaskLayout } from './task-image.js'

/** Bump when the recipe changes (task layer layout, base). */
export const CORPUS_VERSION = 1
const LOCK_TIMEOUT_MS = 30 * 60 * 1000
const FETCH_PARALLEL = 4

export interface TaskImage extends ProjectRelease {
  /** `deploy/<package>:<version>`: the name in the layerd store and (below the registry host) in the registry. */
  ref: string
  /** OCI layout directory (tag 'latest'). */
  layout: string
  manifestDigest: string
  /** Base layers first; the last is the project. */
  layers: LayerBlob[]
  files: number
  /** Bytes of the project's files. */
  projectBytes: number
}

export interface DeployCorpus {
  dir: string
  /** The base image's OCI layout. */
  baseLayout: string
  baseLayers: LayerBlob[]
  tasks: TaskImage[]
}

export function corpusDir (): string {
  return join(fixturesDir(), `deploy-corpus-v${CORPUS_VERSION}`)
}

/** The first K task images, building what is missing (npm downloads on first use). Async. */
export async function ensureDeployCorpus (k: number, log: (line: string) => void): Promise<DeployCorpus> {
  const debian = await ensureDebianImages({ log })
  const base = debian.images['python-v1']
  const dir = corpusDir()
  await mkdir(join(dir, 'images'), { recursive: true })
  const release = await acquireLock(`${dir}.lock`, LOCK_TIMEOUT_MS)
  try {
    await removeStaleBuilds(join(dir, 'images'))
    const plan = planReleases(k, await projectVersions(dir))
    const tasks: TaskImage[] = new Array(plan.length)
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < plan.length) {
        const i = next++
        tasks[i] = await ensureTaskImage(dir, base.ociLayout, plan[i]!, log)
      }
    }
    await Promise.all(Array.from({ length: FETCH_PARALLEL }, worker))
    const baseLayers = tasks[0]?.layers.slice(0, -1) ?? []
    return { dir, baseLayout: base.ociLayout, baseLayers, tasks }
  } finally {
    await release()
  }
}

async function ensureTaskImage (dir: string, baseLayout: string, r: ProjectRelease, log: (line: string) => void): Promise<TaskImage> {
  const final = join(dir, 'images', `${r.project}-${r.version}`)
  const metaFile = join(final, 'task.json')
  if (await access(metaFile).then(() => true, () => false)) return { ...JSON.parse(await readFile(metaFile, 'utf8')) as TaskImage, layout: final }
  const tgz = await fetchRelease(dir, r)
  const tree = await projectTree(tgz)
  const tmp = join(dir, 'images', `${BUILDING_PREFIX}${process.pid}-${r.project}-${r.version}`)
  try {
    const label = `${r.project}@${r.version}`
    const layout = await writeTaskLayout(tmp, baseLayout, tree, label)
    const task: TaskImage = {
      ...r,
      ref: `deploy/${r.project}:${r.version}`,
      layout: final,
      manifestDigest: layout.manifestDigest,
      layers: layout.layers,
      files: tree.files,
      projectBytes: tree.bytes
    }
    await writeFile(join(tmp, 'task.json'), JSON.stringify(task, null, 1))
    await rename(tmp, final)
    log(`corpus: built ${label}: ${tree.files} files, ${(tree.bytes / 1e6).toFixed(1)} MB, layer ${(layout.layers.at(-1)!.size / 1e6).toFixed(1)} MB gzip`)
    return task
  } catch (err) {
    await removeBuildDir(tmp).catch(() => {})
    throw err
  }
}
