/**
 * The layer table (layers.json at the repository root), read once and turned
 * into what enforces it: dependency-cruiser's forbidden rules
 * (.dependency-cruiser.mjs) and README.md's architecture table
 * (layers-table.mjs). Plain JavaScript, so `npm run lint` works before the
 * TypeScript build.
 *
 * A path in the table is a folder ("src/cache/"), a file ("src/errors.ts")
 * or a suffix pattern ("*.test.ts"). A module belongs to the most specific
 * entry that names it: a suffix pattern first (test code), then the longest
 * path that is a prefix of it.
 *
 * May import: node built-ins.
 */
import { readFileSync, readdirSync, existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The repository root: this file lives in <root>/lint/. */
export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..')

/**
 * @typedef {{ name: string, paths: string[], role: string, mayImport: string[] }} Layer
 */

/**
 * Read and check layers.json. Sync. Throws an Error naming the entry and the
 * problem: a duplicate name or path, an unknown name in mayImport, or a cycle.
 * @param {string} [file]
 * @returns {Layer[]}
 */
export function loadLayers (file = join(REPO_ROOT, 'layers.json')) {
  /** @type {{ layers: Layer[] }} */
  const table = JSON.parse(readFileSync(file, 'utf8'))
  const layers = table.layers
  const names = new Set()
  const paths = new Set()
  for (const l of layers) {
    if (names.has(l.name)) throw new Error(`${file}: layer "${l.name}" is named twice`)
    names.add(l.name)
    for (const p of l.paths) {
      if (paths.has(p)) throw new Error(`${file}: path "${p}" is in two layers`)
      paths.add(p)
    }
  }
  for (const l of layers) {
    for (const m of l.mayImport) {
      if (m !== '*' && !names.has(m)) throw new Error(`${file}: layer "${l.name}" may import "${m}", which is not a layer`)
      if (m === l.name) throw new Error(`${file}: layer "${l.name}" lists itself in mayImport (a layer always may)`)
    }
  }
  const cycle = findCycle(layers)
  if (cycle) throw new Error(`${file}: the layers form a cycle: ${cycle.join(' → ')}`)
  return layers
}

/** @param {Layer[]} layers @returns {string[] | undefined} */
function findCycle (layers) {
  const byName = new Map(layers.map(l => [l.name, l]))
  const state = new Map()
  /** @param {string} name @param {string[]} trail @returns {string[] | undefined} */
  const visit = (name, trail) => {
    if (state.get(name) === 'done') return undefined
    if (state.get(name) === 'open') return [...trail.slice(trail.indexOf(name)), name]
    state.set(name, 'open')
    for (const m of byName.get(name)?.mayImport ?? []) {
      if (m === '*') continue
      const found = visit(m, [...trail, name])
      if (found) return found
    }
    state.set(name, 'done')
    return undefined
  }
  for (const l of layers) {
    const found = visit(l.name, [])
    if (found) return found
  }
  return undefined
}

const isPattern = (/** @type {string} */ p) => p.startsWith('*')
const escape = (/** @type {string} */ s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

/** A regular expression (source) matching the paths one table entry names. @param {string} p */
export function pathRegex (p) {
  if (isPattern(p)) return `${escape(p.slice(1))}$`
  return p.endsWith('/') ? `^${escape(p)}` : `^${escape(p)}$`
}

/**
 * The layer of a module, by its path relative to the repository root
 * ("src/cache/chunk-fetcher.ts"), or undefined when no entry names it.
 * @param {Layer[]} layers @param {string} path @returns {Layer | undefined}
 */
export function layerOf (layers, path) {
  let best
  let bestScore = -1
  for (const l of layers) {
    for (const p of l.paths) {
      const hit = new RegExp(pathRegex(p)).test(path)
      if (!hit) continue
      const score = isPattern(p) ? Number.MAX_SAFE_INTEGER : p.length
      if (score > bestScore) { best = l; bestScore = score }
    }
  }
  return best
}

/**
 * The paths of other layers that are more specific than one of `layer`'s
 * own, so they must be cut out of its match (daemon-client's files inside
 * src/daemon/, test files inside every folder).
 * @param {Layer[]} layers @param {Layer} layer @returns {string[]}
 */
function carvedOut (layers, layer) {
  const out = []
  for (const other of layers) {
    if (other === layer) continue
    for (const p of other.paths) {
      if (isPattern(p)) { out.push(p); continue }
      if (layer.paths.some(own => !isPattern(own) && own.endsWith('/') && p !== own && p.startsWith(own))) out.push(p)
    }
  }
  return out
}

/** dependency-cruiser's `path`/`pathNot` pair matching exactly the modules of `layer`. */
function matcher (/** @type {Layer[]} */ layers, /** @type {Layer} */ layer) {
  const not = carvedOut(layers, layer)
  return { path: layer.paths.map(pathRegex), ...(not.length > 0 ? { pathNot: not.map(pathRegex) } : {}) }
}

/**
 * dependency-cruiser forbidden rules for the table: for each layer, one rule
 * per layer it may not import; production code may not import test code or
 * a devDependency; every module under src/ must belong to a layer.
 * @param {Layer[]} layers
 */
export function forbiddenRules (layers) {
  const tests = layers.find(l => l.name === 'tests')
  if (tests === undefined) throw new Error('layers.json: a "tests" layer is required')
  const open = layers.filter(l => l.mayImport.includes('*'))
  const rules = []
  for (const from of layers) {
    if (from.mayImport.includes('*')) continue
    for (const to of layers) {
      if (to === from || from.mayImport.includes(to.name)) continue
      rules.push({
        name: `layer:${from.name}-not-${to.name}`,
        comment: `${from.name} may import only ${from.mayImport.join(', ') || 'nothing'} (layers.json)`,
        severity: 'error',
        from: matcher(layers, from),
        to: matcher(layers, to)
      })
    }
  }
  const openPaths = open.flatMap(l => l.paths).map(pathRegex)
  rules.push({
    name: 'no-dev-dependency-in-production',
    comment: 'production code may not import a devDependency (tap, s3rver, …): only test code and tools may',
    severity: 'error',
    from: { pathNot: openPaths },
    to: { dependencyTypes: ['npm-dev'], dependencyTypesNot: ['type-only'] }
  })
  const known = layers.flatMap(l => l.paths).map(pathRegex)
  rules.push({
    name: 'layer:unplaced-module',
    comment: 'every module must belong to a layer: give its folder a row in layers.json',
    severity: 'error',
    from: { path: '^(src|cli|layerd|bench|fixtures|lint)/', pathNot: known },
    to: {}
  })
  return rules
}

/**
 * Folders under src/ (one level) and top-level files there that no table
 * entry names: each needs a row. Sync.
 * @param {Layer[]} layers @returns {string[]}
 */
export function unplacedFolders (layers, root = REPO_ROOT) {
  const src = join(root, 'src')
  if (!existsSync(src)) return []
  const missing = []
  for (const d of readdirSync(src, { withFileTypes: true })) {
    const rel = d.isDirectory() ? `src/${d.name}/` : `src/${d.name}`
    if (!d.isDirectory() && !d.name.endsWith('.ts')) continue
    if (layerOf(layers, d.isDirectory() ? `${rel}x.ts` : rel) === undefined) missing.push(rel)
  }
  return missing
}

/**
 * README.md's architecture table, rendered from the layers: one row per
 * layer with its folders, role and what it may import ("all but …" when
 * naming what it may not is shorter; test code is never importable).
 * @param {Layer[]} layers @returns {string}
 */
export function renderTable (layers) {
  const byName = new Map(layers.map(l => [l.name, l]))
  const code = (/** @type {string} */ s) => '`' + s + '`'
  const rows = ['| layer | folders | role | may import |', '|---|---|---|---|']
  const production = layers.filter(l => !l.mayImport.includes('*'))
  for (const l of layers) {
    const excluded = production.filter(o => o !== l && !l.mayImport.includes(o.name)).map(o => o.name)
    const may = l.mayImport.includes('*')
      ? 'anything'
      : l.mayImport.length === 0
        ? 'nothing'
        : excluded.length === 0 ? 'all'
          : excluded.length < l.mayImport.length ? `all but ${excluded.join(', ')}` : l.mayImport.map(n => byName.get(n)?.name ?? n).join(', ')
    rows.push(`| ${l.name} | ${l.paths.map(code).join(', ')} | ${l.role} | ${may} |`)
  }
  return rows.join('\n')
}

export const TABLE_BEGIN = '<!-- layers.json: generated by `node lint/layers-table.mjs --write`; do not edit by hand -->'
export const TABLE_END = '<!-- end of layers.json table -->'

/**
 * The README with its architecture table (or the table between the markers
 * `beginMark` and `endMark`) replaced by `table`. Throws when the README
 * lacks the markers.
 * @param {string} readme @param {string} table @param {string} [beginMark] @param {string} [endMark] @returns {string}
 */
export function withTable (readme, table, beginMark = TABLE_BEGIN, endMark = TABLE_END) {
  const begin = readme.indexOf(beginMark)
  const end = readme.indexOf(endMark)
  if (begin < 0 || end < begin) throw new Error(`README.md has no table between ${beginMark} and ${endMark}`)
  return readme.slice(0, begin + beginMark.length) + '\n' + table + '\n' + readme.slice(end)
}
