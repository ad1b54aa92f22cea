/**
 * dependency-cruiser's configuration for `npm run lint`: the forbidden rules
 * are generated from layers.json (lint/layers.mjs), so the layering is
 * written in one place. Type-only imports count: a layer that needs another's
 * type depends on it.
 */
import { existsSync } from 'node:fs'
import { forbiddenRules, loadLayers } from './lint/layers.mjs'

export default {
  forbidden: forbiddenRules(loadLayers()),
  options: {
    tsPreCompilationDeps: true,
    ...(existsSync('tsconfig.json') ? { tsConfig: { fileName: 'tsconfig.json' } } : {}),
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^dist/' },
    reporterOptions: { text: { highlightFocused: true } }
  }
}
