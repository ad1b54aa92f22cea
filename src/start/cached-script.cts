/**
 * Running one CommonJS file as the process's main module, compiled with a
 * V8 code cache kept beside it (Node 20 has no module compile cache:
 * `module.enableCompileCache` came in 22.1). layerd's start runs its
 * one-file bundle this way (layerd/layerd.cts, build/layerd-bundle.ts).
 *
 * The cache file is a header (magic, then the SHA-256 of the source) and
 * V8's cached data. V8 checks only its own version, its flags and the
 * source's *length*, so the digest is what tells a rebuilt file of the same
 * length from the one the cache was made for. A cache that is missing,
 * made for other bytes, cut short or refused by V8 is ignored and written
 * anew when the process exits, by then holding the bytecode of every
 * function the run compiled (a write that fails is skipped: the next run
 * compiles without it). The write goes through a temporary file and a
 * rename, so concurrent starts never read half a cache.
 *
 * V8 refuses a cache made under other flags, so each set of node flags
 * (`process.execArgv`, NODE_OPTIONS) and node version has its own file
 * (codeCachePath()): starts with other flags (a test's, a unit file's) never
 * overwrite the launcher's. Flags set at run time (`v8.setFlagsFromString`)
 * change V8's flag hash too: a cache written after one is refused at the
 * next start, so code that sets one sets it back
 * (src/daemon/memory/memory-settler.ts).
 *
 * CommonJS (a .cts file) and importing only node built-ins: it runs before
 * anything else, and loading ESM first would cost the loader's start.
 *
 * May import: node built-ins.
 */
import { createHash } from 'node:crypto'
import { readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs'
import Module = require('node:module')
import { dirname } from 'node:path'
import { Script, constants as vmConstants } from 'node:vm'

/** What became of the code cache at this start. */
export type CodeCacheOutcome = 'accepted' | 'missing' | 'stale' | 'rejected'

export interface CachedScriptRun {
  /** The file run (absolute). */
  file: string
  cacheFile: string
  codeCache: CodeCacheOutcome
  /** Reading the file and the cache and compiling the script's top level, ms. */
  compileMs: number
}

const MAGIC = Buffer.from('LDCC1\n', 'latin1')
const DIGEST_BYTES = 32
const HEADER_BYTES = MAGIC.length + DIGEST_BYTES
/** Where the run's record is left for the code it ran (cachedScriptRun()), across module copies (a bundle has its own). */
const RUN_RECORD = Symbol.for('layerd.cachedScriptRun')

/** The record of the cached-script run that started this process, or undefined when its main module was run by Node itself. Sync. */
export function cachedScriptRun (): CachedScriptRun | undefined {
  return (globalThis as Record<symbol, CachedScriptRun | undefined>)[RUN_RECORD]
}

/**
 * The code cache file of `file` for this process's node version and flags: `<file less .cjs>.<key>.v8cache`
 * beside it, the key a digest of `process.version`, `process.execArgv` and NODE_OPTIONS. Sync.
 */
export function codeCachePath (file: string): string {
  const key = createHash('sha256').update([process.version, ...process.execArgv, process.env.NODE_OPTIONS ?? ''].join('\0')).digest('hex').slice(0, 12)
  return `${file.replace(/\.c?js$/, '')}.${key}${CODE_CACHE_SUFFIX}`
}

/** How every code cache file's name ends (the build removes them with the bundle they were made for). */
export const CODE_CACHE_SUFFIX = '.v8cache'

/** V8's cached data in `cache` if its header matches `digest`, else why not. Pure. */
export function cachedDataFor (cache: Buffer | undefined, digest: Buffer): Buffer | 'missing' | 'stale' {
  if (cache === undefined) return 'missing'
  if (cache.length <= HEADER_BYTES || !cache.subarray(0, MAGIC.length).equals(MAGIC)) return 'stale'
  if (!cache.subarray(MAGIC.length, HEADER_BYTES).equals(digest)) return 'stale'
  return cache.subarray(HEADER_BYTES)
}

/** Write `data` as the cache for the source of `digest`, atomically; false if it could not be written. Sync; never throws. */
export function writeCodeCache (cacheFile: string, digest: Buffer, data: Buffer): boolean {
  const tmp = `${cacheFile}.${process.pid}.tmp`
  try {
    writeFileSync(tmp, Buffer.concat([MAGIC, digest, data]), { mode: 0o644 })
    renameSync(tmp, cacheFile)
    return true
  } catch {
    try { unlinkSync(tmp) } catch {}
    return false
  }
}

/**
 * Run the CommonJS file `file` as this process's main module (its
 * `require`, `module`, `__filename` and `__dirname`; `process.argv[1]`
 * becomes `file`), compiled with the code cache `cacheFile`. Sync: returns
 * once the file's top level has run. Throws what reading `file` throws
 * (ENOENT names it), a SyntaxError for a file that does not compile, and
 * whatever the file's top level throws; a bad cache never throws.
 */
export function runCachedScript (file: string, cacheFile: string): CachedScriptRun {
  const t0 = performance.now()
  // A `#!` line is a comment only at the very start of a file; wrapped, it is not.
  const source = readFileSync(file, 'utf8').replace(/^#!/, '//')
  const digest = createHash('sha256').update(source).digest()
  let cache: Buffer | undefined
  try { cache = readFileSync(cacheFile) } catch {}
  const found = cachedDataFor(cache, digest)
  const script = new Script(Module.wrap(source), {
    filename: file,
    ...(typeof found === 'string' ? {} : { cachedData: found }),
    // An import() in the file goes to Node's own loader. Node 20 loses this for functions compiled from the cache
    // ("A dynamic import callback was not specified"), so the bundles have none (build/layerd-bundle.ts).
    importModuleDynamically: vmConstants.USE_MAIN_CONTEXT_DEFAULT_LOADER
  })
  const codeCache: CodeCacheOutcome = typeof found === 'string' ? found : script.cachedDataRejected === true ? 'rejected' : 'accepted'
  if (codeCache !== 'accepted') process.once('exit', () => { writeCodeCache(cacheFile, digest, script.createCachedData()) })
  const run: CachedScriptRun = { file, cacheFile, codeCache, compileMs: performance.now() - t0 }
  ;(globalThis as Record<symbol, CachedScriptRun | undefined>)[RUN_RECORD] = run
  const main = new Module(file, undefined)
  main.filename = file
  main.paths = (Module as unknown as { _nodeModulePaths: (dir: string) => string[] })._nodeModulePaths(dirname(file))
  process.argv[1] = file
  const wrapper = script.runInThisContext() as (exports: unknown, require: NodeJS.Require, module: Module, filename: string, dirname: string) => void
  wrapper.call(main.exports, main.exports, Module.createRequire(file), main, file, dirname(file))
  main.loaded = true
  return run
}

