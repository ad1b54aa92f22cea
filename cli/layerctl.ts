#!/usr/bin/env node
/**
 * layerctl's entry (dist/cli/layerctl.js): runs the one-file bundle of cli/layerctl-main.ts
 * (dist/cli/layerctl.bundle.cjs, made by `npm run build`) with its V8 code cache (src/start/cached-script.cts),
 * instead of loading ~170 modules. `node dist/cli/layerctl-main.js` runs the same CLI from the modules.
 * Exit 1 when the bundle is missing or does not load.
 */
import { fileURLToPath } from 'node:url'
import { codeCachePath, runCachedScript } from '../src/start/cached-script.cjs'

const bundle = fileURLToPath(new URL('./layerctl.bundle.cjs', import.meta.url))
try {
  runCachedScript(bundle, codeCachePath(bundle))
} catch (err) {
  console.error(`layerctl: cannot load its bundle: ${(err as Error)?.stack ?? String(err)}; \`npm run build\` makes it`)
  process.exitCode = 1
}
