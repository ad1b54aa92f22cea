import t from 'tap'
import { spawnSync } from 'node:child_process'
import { cpSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

// Compiled to dist/lint/: the repository root is two levels up.
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const FIGURES = join(ROOT, 'lint', 'figures-table.mjs')
const HISTORY = join(ROOT, 'lint', 'doc-history.mjs')

function run (script: string, args: string[], cwd = ROOT): { status: number | null, out: string } {
  const r = spawnSync(process.execPath, [script, ...args], { cwd, encoding: 'utf8' })
  return { status: r.status, out: r.stdout + r.stderr }
}

/** A copy of bench/results/ whose result `file` has `edit` applied to its JSON. */
function editedResults (dir: string, file: string, edit: (j: any) => void): string {
  const results = join(dir, 'results')
  cpSync(join(ROOT, 'bench', 'results'), results, { recursive: true })
  const j = JSON.parse(readFileSync(join(results, file), 'utf8'))
  edit(j)
  writeFileSync(join(results, file), JSON.stringify(j))
  return results
}

t.test("the README's Figures table is the one the committed results render to", async t => {
  const r = run(FIGURES, ['--check'])
  t.equal(r.status, 0, r.out)
})

t.test('a hand edit to a figure in the README is refused, naming the line', async t => {
  const dir = t.testdir({})
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const edited = readme.replace(/\*\*3\.02x\*\*/, '**3.50x**')
  t.not(edited, readme, 'the deploy row shows 3.02x')
  writeFileSync(join(dir, 'README.md'), edited)
  const r = run(FIGURES, ['--check', '--readme', join(dir, 'README.md')])
  t.equal(r.status, 1)
  t.match(r.out, /the Figures table differs/)
  t.match(r.out, /README: {2}\| deploy.*3\.50x/)
  t.match(r.out, /results: \| deploy.*3\.02x/)
})

t.test('a rerun whose result moved fails the check until the README is rewritten', async t => {
  const dir = t.testdir({})
  const results = editedResults(dir, 'deploy-8192.json', j => { j.layerdS3.seconds = j.docker.seconds / 2.5 })
  const r = run(FIGURES, ['--check', '--results', results])
  t.equal(r.status, 1, r.out)
  t.match(r.out, /results: \| deploy.*\*\*2\.50x\*\* ✗/, 'the new figure, under its 3x target, is marked missed')
  cpSync(join(ROOT, 'README.md'), join(dir, 'README.md'))
  t.equal(run(FIGURES, ['--write', '--results', results, '--readme', join(dir, 'README.md')]).status, 0)
  t.equal(run(FIGURES, ['--check', '--results', results, '--readme', join(dir, 'README.md')]).status, 0, 'written, it matches')
})

t.test('a row whose result lacks the value, or a missing result file, is refused by name', async t => {
  const dir = t.testdir({})
  const results = editedResults(dir, 'deploy-8192.json', j => { delete j.docker.bytesWritten })
  const r = run(FIGURES, ['--check', '--results', results])
  t.equal(r.status, 1)
  t.match(r.out, /row \d+ \(deploy.*the result has no "docker\.bytesWritten"/)
  const manifest = JSON.parse(readFileSync(join(ROOT, 'bench', 'figures.json'), 'utf8'))
  manifest.rows.push({ what: 'nothing yet', result: 'no-such-bench.json', figure: 'x', values: {}, target: 'y' })
  writeFileSync(join(dir, 'figures.json'), JSON.stringify(manifest))
  const missing = run(FIGURES, ['--check', '--manifest', join(dir, 'figures.json')])
  t.equal(missing.status, 1)
  t.match(missing.out, /nothing yet\): no result file .*no-such-bench\.json/)
})

t.test('a cell over 15 words is refused', async t => {
  const dir = t.testdir({})
  const manifest = JSON.parse(readFileSync(join(ROOT, 'bench', 'figures.json'), 'utf8'))
  manifest.rows[0].target = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen'
  writeFileSync(join(dir, 'figures.json'), JSON.stringify(manifest))
  const r = run(FIGURES, ['--check', '--manifest', join(dir, 'figures.json')])
  t.equal(r.status, 1)
  t.match(r.out, /a cell has 16 words \(at most 15\)/)
})

t.test('doc-history refuses sessions and dates in documents and comments, not data in code', async t => {
  const dir = t.testdir({
    'ok.md': 'The cache commits in batches of 50 ms.\n',
    'data.ts': "const CREATED = '2024-01-01'\n/** Every entry's mtime: 2024-01-01T00:00:00Z. */\n"
  })
  const git = (...args: string[]): void => { spawnSync('git', args, { cwd: dir }) }
  git('init', '-q')
  git('add', '.')
  t.equal(run(HISTORY, ['--root', dir]).status, 0, 'code data and ISO timestamps pass')
  writeFileSync(join(dir, 'bad.md'), 'Rerun on main (2026-12-04, load 2).\nMeasured in session 27.\n')
  // Assembled, so that this file does not hold the words it tests for.
  writeFileSync(join(dir, 'bad.ts'), ['// Before this', 'change the step was 4 MiB.\nconst x = 1 // since 2026-', '12-03\n'].join(' ').replace(' 12-03', '12-03'))
  git('add', '.')
  const r = run(HISTORY, ['--root', dir])
  t.equal(r.status, 1)
  t.match(r.out, /bad\.md:1: history/)
  t.match(r.out, /bad\.md:2: history/)
  t.match(r.out, /bad\.ts:1: history/)
  t.match(r.out, /bad\.ts:2: history/)
  t.match(r.out, /4 line\(s\)/)
})
