#!/usr/bin/env -S node --max-semi-space-size=1
/**
 * layerd's start path: runs the one-file bundle of layerd/main.ts
 * (dist/layerd/main.bundle.cjs, made by `npm run build`: build/layerd-bundle.ts)
 * with its V8 code cache for these node flags (main.bundle.<key>.v8cache) (src/start/cached-script.cts), so that a start
 * reads and compiles one file instead of ~150 modules. The flags and
 * behaviour are layerd/main.ts's; `node dist/layerd/main.js` still runs the
 * same daemon from the unbundled modules.
 *
 * Exit 5 (LAYERD_EXIT.FATAL) when the bundle is missing or does not load.
 */
import { join } from 'node:path'
import { codeCachePath, runCachedScript } from '../src/start/cached-script.cjs'

/** src/exit-codes.ts's LAYERD_EXIT.FATAL (that module is ESM, which this CommonJS entry does not load). */
const EXIT_FATAL = 5

try {
  const bundle = join(__dirname, 'main.bundle.cjs')
  runCachedScript(bundle, codeCachePath(bundle))
} catch (err) {
  console.error(`layerd: cannot load its bundle: ${(err as Error)?.stack ?? String(err)}; \`npm run build\` makes it`)
  process.exit(EXIT_FATAL)
}
