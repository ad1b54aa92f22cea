#!/usr/bin/env node
/**
 * README.md's Figures table against bench/figures.json and bench/results/,
 * run by `npm run lint`:
 *
 *   node lint/figures-table.mjs [--check] [--write] [--readme FILE] [--manifest FILE] [--results DIR]
 *
 * --check (the default) exits 1, naming the first line that differs, when the
 * README's table is not the one the committed results render to; --write
 * rewrites the table in place. Adding a benchmark's row is one manifest
 * entry (lint/figures.mjs says what an entry holds).
 *
 * May import: ./figures.mjs, node built-ins.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { FIGURES_BEGIN, FIGURES_END, MANIFEST, RESULTS, renderFigures, withFigures } from './figures.mjs'
import { REPO_ROOT } from './layers.mjs'

const { values } = parseArgs({
  strict: true,
  options: {
    check: { type: 'boolean' },
    write: { type: 'boolean' },
    readme: { type: 'string', default: join(REPO_ROOT, 'README.md') },
    manifest: { type: 'string', default: MANIFEST },
    results: { type: 'string', default: RESULTS }
  }
})

let table
try {
  table = renderFigures({ manifest: values.manifest, results: values.results })
} catch (err) {
  console.error(`figures: ${err instanceof Error ? err.message : String(err)}`)
  process.exit(1)
}
const readme = readFileSync(values.readme, 'utf8')
const wanted = withFigures(readme, table)
if (values.write === true) {
  if (wanted !== readme) writeFileSync(values.readme, wanted)
} else if (wanted !== readme) {
  const have = readme.slice(readme.indexOf(FIGURES_BEGIN), readme.indexOf(FIGURES_END)).split('\n')
  const want = wanted.slice(wanted.indexOf(FIGURES_BEGIN), wanted.indexOf(FIGURES_END)).split('\n')
  const first = want.findIndex((line, i) => line !== have[i])
  console.error(`${values.readme}: the Figures table differs from what ${values.results} renders to, at its line ${first}:`)
  console.error(`  README:  ${have[first] ?? '(missing)'}`)
  console.error(`  results: ${want[first] ?? '(no such row)'}`)
  console.error('Run `node lint/figures-table.mjs --write` after a benchmark writes its result or bench/figures.json changes.')
  process.exit(1)
}
console.log(`figures: README.md's table matches ${table.split('\n').length - 2} rows of bench/results/`)
