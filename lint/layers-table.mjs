#!/usr/bin/env node
/**
 * README.md's architecture table against layers.json, run by `npm run lint`:
 *
 *   node lint/layers-table.mjs [--check] [--write] [--readme FILE] [--layers FILE]
 *
 * --check (the default) exits 1, naming the difference, when the README's
 * table is not the one the layers render to, or when a folder under src/
 * has no layer; --write rewrites the table in place.
 *
 * May import: ./layers.mjs, node built-ins.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { REPO_ROOT, TABLE_BEGIN, TABLE_END, loadLayers, renderTable, unplacedFolders, withTable } from './layers.mjs'

const { values } = parseArgs({
  strict: true,
  options: {
    check: { type: 'boolean' },
    write: { type: 'boolean' },
    readme: { type: 'string', default: join(REPO_ROOT, 'README.md') },
    layers: { type: 'string', default: join(REPO_ROOT, 'layers.json') }
  }
})

const layers = loadLayers(values.layers)
const readme = readFileSync(values.readme, 'utf8')
const wanted = withTable(readme, renderTable(layers))
let failed = false
if (values.write === true) {
  if (wanted !== readme) writeFileSync(values.readme, wanted)
} else if (wanted !== readme) {
  const have = readme.slice(readme.indexOf(TABLE_BEGIN), readme.indexOf(TABLE_END)).split('\n')
  const want = wanted.slice(wanted.indexOf(TABLE_BEGIN), wanted.indexOf(TABLE_END)).split('\n')
  const first = want.findIndex((line, i) => line !== have[i])
  console.error(`${values.readme}: the architecture table differs from ${values.layers} at its line ${first}:`)
  console.error(`  README:      ${have[first] ?? '(missing)'}`)
  console.error(`  layers.json: ${want[first] ?? '(no such row)'}`)
  console.error('Run `node lint/layers-table.mjs --write` after changing layers.json.')
  failed = true
}
const unplaced = unplacedFolders(layers)
if (unplaced.length > 0) {
  console.error(`${values.layers}: no layer names ${unplaced.join(', ')}: give each a row (its role and what it may import).`)
  failed = true
}
if (!failed) console.log(`layers: README.md's table matches ${layers.length} layers`)
process.exit(failed ? 1 : 0)
