/**
 * The project trees of the deploy corpus: successive releases of real npm
 * packages, fetched with `npm pack` (the npm registry is the one package
 * source reachable here) and kept in the corpus cache.
 *
 * Task i uses project i mod P at its (i div P)-th newest release within the
 * project's majors, so the K task images are K distinct (package, version)
 * pairs, and tasks of one package are consecutive releases: real
 * version-to-version similarity, as between the commits of an SWE task set.
 *
 * Bench-only: may import fixtures/run-command.ts and node built-ins.
 */
import { access, mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { runCommand } from '../../fixtures/run-command.js'

export interface NpmProject {
  name: string
  /** Major versions whose releases (x.y.z, no pre-releases) are used. */
  majors: number[]
  /** What the tree is like, for the report. */
  shape: string
}

/**
 * Five packages with different tree shapes: a few very large files
 * (typescript), hundreds to thousands of small modules (eslint, webpack,
 * rxjs), and a bundled tool (prettier). About 520 distinct releases in all.
 */
export const NPM_PROJECTS: NpmProject[] = [
  { name: 'typescript', majors: [4, 5], shape: '~100-200 files, 30-60 MB, large compiler bundles' },
  { name: 'eslint', majors: [8, 9], shape: '~400 files, 3 MB of small modules' },
  { name: 'webpack', majors: [5], shape: '~600 files, 5 MB' },
  { name: 'rxjs', majors: [6, 7], shape: '~2,000 files, 4-10 MB (cjs, esm, types, src)' },
  { name: 'prettier', majors: [2, 3], shape: '~50 files, 8 MB of bundles' }
]

export interface ProjectRelease { project: string, version: string }

const STABLE_RE = /^(\d+)\.(\d+)\.(\d+)$/

function compareSemver (a: string, b: string): number {
  const pa = STABLE_RE.exec(a)!.slice(1).map(Number)
  const pb = STABLE_RE.exec(b)!.slice(1).map(Number)
  for (let i = 0; i < 3; i++) if (pa[i] !== pb[i]) return pa[i]! - pb[i]!
  return 0
}

/** Stable releases of `project` within its majors, oldest first. Pure. */
export function selectReleases (project: NpmProject, allVersions: string[]): string[] {
  return allVersions
    .filter(v => STABLE_RE.test(v) && project.majors.includes(Number(STABLE_RE.exec(v)![1])))
    .sort(compareSemver)
}

/**
 * The K (project, version) pairs of the corpus, in task order. Pure.
 * Throws Error when K exceeds the releases available.
 */
export function planReleases (k: number, versions: Record<string, string[]>, projects: NpmProject[] = NPM_PROJECTS): ProjectRelease[] {
  const lists = projects.map(p => ({ name: p.name, releases: selectReleases(p, versions[p.name] ?? []) }))
  const total = lists.reduce((n, l) => n + l.releases.length, 0)
  if (k > total) throw new Error(`--images ${k}: the corpus has only ${total} distinct releases (${lists.map(l => `${l.name} ${l.releases.length}`).join(', ')})`)
  const out: ProjectRelease[] = []
  const taken = lists.map(() => 0)
  for (let i = 0; out.length < k; i++) {
    const p = i % lists.length
    const l = lists[p]!
    if (taken[p]! >= l.releases.length) continue // this project is used up; the others fill in
    out.push({ project: l.name, version: l.releases[l.releases.length - 1 - taken[p]!]! })
    taken[p]!++
  }
  return out
}

/**
 * Every project's published versions, from `<dir>/npm-versions.json`, or
 * asked of the registry once (`npm view NAME versions --json`) and saved.
 * Async; rejects naming the package when npm fails.
 */
export async function projectVersions (dir: string): Promise<Record<string, string[]>> {
  const file = join(dir, 'npm-versions.json')
  let known: Record<string, string[]> = {}
  try { known = JSON.parse(await readFile(file, 'utf8')) as Record<string, string[]> } catch {}
  let changed = false
  for (const p of NPM_PROJECTS) {
    if (known[p.name] !== undefined) continue
    const out = await runCommand('npm', ['view', p.name, 'versions', '--json'], { cwd: dir })
    known[p.name] = JSON.parse(out) as string[]
    changed = true
  }
  if (changed) {
    await writeFile(`${file}.tmp`, JSON.stringify(known, null, 1))
    await rename(`${file}.tmp`, file)
  }
  return known
}

/** The release's tarball in `<dir>/npm/`, downloaded with `npm pack` when missing. Async. */
export async function fetchRelease (dir: string, r: ProjectRelease): Promise<string> {
  const npmDir = join(dir, 'npm')
  await mkdir(npmDir, { recursive: true })
  const target = join(npmDir, `${r.project.replace(/^@/, '').replace('/', '-')}-${r.version}.tgz`)
  if (await access(target).then(() => true, () => false)) return target
  const tmp = join(npmDir, `.pack-${process.pid}-${r.project.replace('/', '-')}-${r.version}`)
  await mkdir(tmp, { recursive: true })
  await runCommand('npm', ['pack', `${r.project}@${r.version}`, '--silent', '--pack-destination', tmp], { cwd: tmp })
  const [tgz, ...more] = (await readdir(tmp)).filter(n => n.endsWith('.tgz'))
  if (tgz === undefined || more.length > 0) throw new Error(`npm pack ${r.project}@${r.version} left ${more.length + (tgz === undefined ? 0 : 1)} tarballs in ${tmp}`)
  await rename(join(tmp, tgz), target)
  await runCommand('rm', ['-rf', tmp])
  return target
}
