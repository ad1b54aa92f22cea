#!/usr/bin/env node
/**
 * The documents say what the software is, not when it changed: run by
 * `npm run lint`, this exits 1, naming file and line, when a tracked Markdown
 * file or a TypeScript comment numbers a work session ("session 27"), says
 * "before this change", or gives a calendar date (2026-12-04). git log holds
 * the history; the run logs under bench/results/ are records, dated on
 * purpose, and are not checked.
 *
 * In TypeScript only comments are read: a timestamp in code is data (a
 * fixture's mtime, a SigV4 test vector's date). An ISO timestamp with its
 * time (`2024-01-01T00:00:00Z`) is data in a comment too.
 *
 *   node lint/doc-history.mjs [--root DIR]
 *
 * May import: ./layers.mjs, node built-ins.
 */
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { REPO_ROOT } from './layers.mjs'

const HISTORY = /\bsession \d+|before this change|\b20\d\d-[01]\d-[0-3]\d(?!T\d)/i
/** Where a TypeScript comment starts on a line: `//`, `/*`, or a doc comment's ` * `. */
const COMMENT = /\/\/|\/\*|^\s*\*/

/**
 * The offending lines of one file's text: [line number, line].
 * @param {string} path @param {string} text @returns {Array<[number, string]>}
 */
function historyLines (path, text) {
  const ts = path.endsWith('.ts')
  const hits = /** @type {Array<[number, string]>} */ ([])
  for (const [i, line] of text.split('\n').entries()) {
    let part = line
    if (ts) {
      const c = COMMENT.exec(line)
      if (c === null) continue
      part = line.slice(c.index)
    }
    if (HISTORY.test(part)) hits.push([i + 1, line])
  }
  return hits
}

const { values } = parseArgs({ strict: true, options: { root: { type: 'string', default: REPO_ROOT } } })
const files = execFileSync('git', ['ls-files', '-z', '--', '*.md', '*.ts', ':!bench/results/'], { cwd: values.root, encoding: 'utf8' })
  .split('\0').filter(f => f !== '')
let count = 0
for (const file of files) {
  let text
  try { text = readFileSync(join(values.root, file), 'utf8') } catch { continue } // listed but deleted in the work tree
  for (const [n, line] of historyLines(file, text)) {
    console.error(`${file}:${n}: history in a document: ${line.trim().slice(0, 160)}`)
    count++
  }
}
if (count > 0) {
  console.error(`doc-history: ${count} line(s) date the text or name a session; say what is, and leave when to git log`)
  process.exit(1)
}
console.log(`doc-history: ${files.length} documents and sources say no dates or sessions`)
