/**
 * The bundled start paths of layerd and layerctl, run by `npm run build` after tsc:
 *
 *   node dist/build/layerd-bundle.js [--no-train]
 *
 * 1. esbuild bundles the compiled entry dist/layerd/main.js and every module
 *    of this tree it imports (statically or by a literal `import()`) into
 *    one CommonJS file, dist/layerd/main.bundle.cjs, which
 *    dist/layerd/layerd.cjs runs (layerd/layerd.cts); and the same for
 *    dist/cli/layerctl-main.js into dist/cli/layerctl.bundle.cjs, which
 *    dist/cli/layerctl.js runs (cli/layerctl.ts). Packages stay
 *    external (required from node_modules as before: the addons, and
 *    bundling lmdb/msgpackr's JS too measured no faster, bench/README.md).
 *    Each module's `import.meta.url` becomes its own file's URL in dist/, so
 *    what it finds relative to itself (the native addon, worker files,
 *    runner.js, the guest agent) is found as unbundled.
 * 2. Trains the code cache: starts layerd from the bundle at a scratch
 *    home with the launcher's node flags, waits until it serves (`mounts`
 *    answered) and stops it; the loader writes the cache for those flags
 *    (dist/layerd/main.bundle.<key>.v8cache) at its exit, with the bytecode
 *    of what the start compiled; while it serves, one `layerctl mounts` does
 *    the same for layerctl's cache. A training run that fails only warns
 *    (the first real start then writes the cache).
 *
 * Exits 1, naming the problem, when the bundle cannot be made (an
 * `import.meta` other than `.url`, a `require` esbuild cannot resolve).
 *
 * Tool (build-time only): may import anything, esbuild included.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join, relative } from 'node:path'
import { parseArgs } from 'node:util'
import { fileURLToPath } from 'node:url'
import { build, type Plugin } from 'esbuild'
import { ControlClient } from '../src/daemon/client/control-client.js'
import { socketPath } from '../src/daemon/client/control-protocol.js'
import { DAEMON_NODE_FLAGS } from '../src/daemon/client/daemon-launcher.js'
import { CODE_CACHE_SUFFIX } from '../src/start/cached-script.cjs'

const DIST = join(dirname(fileURLToPath(import.meta.url)), '..')
export const LAYERD_SOURCE_ENTRY = join(DIST, 'layerd/main.js')
export const LAYERD_BUNDLE = join(DIST, 'layerd/main.bundle.cjs')
export const LAYERD_BUNDLED_ENTRY = join(DIST, 'layerd/layerd.cjs')
export const LAYERCTL_SOURCE_ENTRY = join(DIST, 'cli/layerctl-main.js')
export const LAYERCTL_BUNDLE = join(DIST, 'cli/layerctl.bundle.cjs')
export const LAYERCTL_BUNDLED_ENTRY = join(DIST, 'cli/layerctl.js')
/** The bundles: each entry of dist/ and its one file. */
const BUNDLES = [{ entry: LAYERD_SOURCE_ENTRY, outfile: LAYERD_BUNDLE }, { entry: LAYERCTL_SOURCE_ENTRY, outfile: LAYERCTL_BUNDLE }]
const TRAIN_TIMEOUT_MS = 20_000
const POLL_MS = 10

/** The code cache files beside the bundles (one per bundle and set of node flags it was started with). */
function codeCaches (): string[] {
  return BUNDLES.flatMap(({ outfile }) => {
    const dir = dirname(outfile)
    const stem = basename(outfile).replace(/\.cjs$/, '.')
    return readdirSync(dir).filter(f => f.startsWith(stem) && f.endsWith(CODE_CACHE_SUFFIX)).map(f => join(dir, f))
  })
}

/** esbuild plugin: `import.meta.url` in each module of dist/ becomes that module's own file URL, computed from the bundle's __dirname. */
function ownImportMetaUrl (outfile: string): Plugin {
  return {
    name: 'own-import-meta-url',
    setup (b) {
      b.onLoad({ filter: /\.js$/ }, args => {
        const text = readFileSync(args.path, 'utf8')
        if (!text.includes('import.meta.url')) return undefined
        const rel = JSON.stringify(relative(dirname(outfile), args.path))
        return { contents: text.replaceAll('import.meta.url', `require("node:url").pathToFileURL(require("node:path").join(__dirname, ${rel})).href`), loader: 'js' }
      })
    }
  }
}

/** Bundle the compiled `entry` into the one CommonJS file `outfile`; returns the number of modules of this tree in it. Throws esbuild's errors. */
export async function bundleEntry (entry: string, outfile: string): Promise<{ modules: number, bytes: number }> {
  const result = await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    packages: 'external',
    // import() of a package becomes a require: a function compiled from V8's code cache has no dynamic import
    // callback in Node 20 ("A dynamic import callback was not specified"), and every package used has a CommonJS build.
    supported: { 'dynamic-import': false },
    // Error classes name themselves after their class (src/errors.ts): a renamed class would change `name`.
    keepNames: true,
    sourcemap: 'linked',
    legalComments: 'none',
    metafile: true,
    logLevel: 'warning',
    // A module that reads import.meta other than .url would get an empty object in CommonJS: refuse to build.
    logOverride: { 'empty-import-meta': 'error', 'unsupported-dynamic-import': 'error', 'unsupported-require-call': 'error' },
    plugins: [ownImportMetaUrl(outfile)]
  })
  const text = readFileSync(outfile, 'utf8')
  // A real import() would fail once its function comes from the code cache (src/start/cached-script.cts).
  const dynamicImport = /\bimport\(\s*[^)\s]/.exec(text)
  if (dynamicImport !== null) throw new Error(`${outfile} still has an import() at offset ${dynamicImport.index}: ${text.slice(dynamicImport.index, dynamicImport.index + 80)}`)
  return { modules: Object.keys(result.metafile.inputs).length, bytes: text.length }
}

/** Start layerd from the bundle at a scratch home until it serves, then stop it: its exit writes the code cache. Throws on a failed start. */
export async function trainCodeCache (): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'layerd-train-'))
  const child = spawn(process.execPath, [...DAEMON_NODE_FLAGS, LAYERD_BUNDLED_ENTRY, '--foreground', '--home', home, '--no-restore'],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LAYERD_WARM_STANDBY: '0', LAYERD_HOLDER: '0' } })
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => { stderr = (stderr + d.toString('utf8')).slice(-4000) })
  const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
  let done = false
  void exited.then(() => { done = true })
  try {
    const deadline = Date.now() + TRAIN_TIMEOUT_MS
    for (;;) {
      if (done) throw new Error(`layerd exited while starting: ${stderr.trim()}`)
      if (Date.now() > deadline) throw new Error(`layerd did not serve within ${TRAIN_TIMEOUT_MS} ms: ${stderr.trim()}`)
      const client = await ControlClient.connect(socketPath(home)).catch(() => undefined)
      if (client !== undefined) {
        try { await client.call('mounts') } finally { client.close() }
        await trainLayerctl(home)
        break
      }
      await new Promise(resolve => setTimeout(resolve, POLL_MS))
    }
  } finally {
    if (!done) child.kill('SIGTERM')
    await exited
    rmSync(home, { recursive: true, force: true })
  }
}

/** One `layerctl mounts` against the daemon serving `home`: its exit writes layerctl's code cache. Throws on a failed run. */
async function trainLayerctl (home: string): Promise<void> {
  const child = spawn(process.execPath, [LAYERCTL_BUNDLED_ENTRY, 'mounts'], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LAYERD_HOME: home } })
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => { stderr = (stderr + d.toString('utf8')).slice(-4000) })
  const code = await new Promise<number | null>(resolve => child.once('exit', resolve))
  if (code !== 0) throw new Error(`layerctl mounts exited with ${code}: ${stderr.trim()}`)
}

async function main (): Promise<number> {
  const { values } = parseArgs({ options: { 'no-train': { type: 'boolean' } } })
  for (const { entry, outfile } of BUNDLES) {
    try {
      const made = await bundleEntry(entry, outfile)
      console.log(`layerd-bundle: ${relative(process.cwd(), outfile)}: ${made.modules} modules, ${Math.round(made.bytes / 1024)} KiB`)
    } catch (err) {
      console.error(`layerd-bundle: cannot bundle ${entry}: ${(err as Error).message}`)
      return 1
    }
  }
  // The caches made for the last bundles are stale now (the loader would see so by its digest); do not keep the bytes.
  for (const f of codeCaches()) unlinkSync(f)
  if (values['no-train'] === true) return 0
  try {
    await trainCodeCache()
    for (const f of codeCaches()) console.log(`layerd-bundle: code cache ${relative(process.cwd(), f)}: ${Math.round(readFileSync(f).length / 1024)} KiB`)
  } catch (err) {
    console.warn(`layerd-bundle: warning: no code cache trained (the first start writes it): ${(err as Error).message}`)
  }
  return 0
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main()
