import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { cachedDataFor } from './cached-script.cjs'

const CACHED_SCRIPT = fileURLToPath(new URL('./cached-script.cjs', import.meta.url))

/** Run `file` through runCachedScript in a fresh node (the way layerd/layerd.cts does) with `cache`; its stdout line, parsed. */
function runInNode (file: string, cache: string, flags: string[] = []): { says: string, codeCache: string, argv1: string } {
  const loader = `require(${JSON.stringify(CACHED_SCRIPT)}).runCachedScript(process.argv[1], process.argv[2])`
  return JSON.parse(execFileSync(process.execPath, [...flags, '-e', loader, file, cache], { encoding: 'utf8' })) as { says: string, codeCache: string, argv1: string }
}

/** A CommonJS main module that prints what it says, the run's record and its argv[1]; `extra` runs before. */
function script (says: string, extra = ''): string {
  return `#!/usr/bin/env node\n${extra}\nconst { cachedScriptRun } = require(${JSON.stringify(CACHED_SCRIPT)})\n` +
    `const f = function () { return ${JSON.stringify(says)} }\n` +
    `console.log(JSON.stringify({ says: f(), codeCache: cachedScriptRun().codeCache, argv1: process.argv[1], main: typeof module.exports, dir: __dirname }))\n`
}

t.test('runCachedScript() writes the cache at exit and a second start accepts it', async t => {
  const dir = t.testdir({ 'main.cjs': script('one') })
  const file = join(dir, 'main.cjs')
  const cache = join(dir, 'main.v8cache')
  const first = runInNode(file, cache)
  t.same({ says: first.says, codeCache: first.codeCache, argv1: first.argv1 }, { says: 'one', codeCache: 'missing', argv1: file }, 'the file runs as the main module (argv[1] is the file)')
  t.ok(existsSync(cache), 'the exit wrote the cache')
  t.equal(runInNode(file, cache).codeCache, 'accepted')
  t.equal(runInNode(file, cache).codeCache, 'accepted', 'an accepted cache is left as it is')
})

t.test('runCachedScript() never runs a cache made for other bytes of the same length (V8 checks only the length)', async t => {
  const dir = t.testdir({ 'main.cjs': script('old') })
  const file = join(dir, 'main.cjs')
  const cache = join(dir, 'main.v8cache')
  runInNode(file, cache)
  writeFileSync(file, script('new'))
  const after = runInNode(file, cache)
  t.same({ says: after.says, codeCache: after.codeCache }, { says: 'new', codeCache: 'stale' }, 'the new code runs, and the cache is seen stale')
  t.equal(runInNode(file, cache).codeCache, 'accepted', 'and written anew for the new bytes')
})

t.test('runCachedScript() ignores a cut short or foreign cache file, and runs when the cache cannot be written', async t => {
  const dir = t.testdir({ 'main.cjs': script('x'), 'cut.v8cache': 'LDCC1\n', 'foreign.v8cache': Buffer.alloc(100, 7) })
  const file = join(dir, 'main.cjs')
  t.equal(runInNode(file, join(dir, 'cut.v8cache')).codeCache, 'stale')
  t.equal(runInNode(file, join(dir, 'foreign.v8cache')).codeCache, 'stale')
  t.equal(runInNode(file, join(dir, 'missing', 'main.v8cache')).says, 'x', 'a cache in a missing folder: the run goes on, nothing is written')
  t.notOk(existsSync(join(dir, 'missing')))
})

t.test('a V8 flag changed at run time and left so makes the next start refuse the cache (why memory-settler sets --expose-gc back)', async t => {
  const left = "require('node:v8').setFlagsFromString('--expose-gc')"
  const restored = `${left}; require('node:v8').setFlagsFromString('--no-expose-gc')`
  const dir = t.testdir({ 'left.cjs': script('l', left), 'restored.cjs': script('r', restored) })
  runInNode(join(dir, 'left.cjs'), join(dir, 'left.v8cache'))
  t.equal(runInNode(join(dir, 'left.cjs'), join(dir, 'left.v8cache')).codeCache, 'rejected')
  runInNode(join(dir, 'restored.cjs'), join(dir, 'restored.v8cache'))
  t.equal(runInNode(join(dir, 'restored.cjs'), join(dir, 'restored.v8cache')).codeCache, 'accepted')
})

t.test('cachedDataFor() returns the V8 data only under a header for the same digest', async t => {
  const digest = Buffer.alloc(32, 1)
  const cache = Buffer.concat([Buffer.from('LDCC1\n', 'latin1'), digest, Buffer.from('v8')])
  t.same(cachedDataFor(cache, digest), Buffer.from('v8'))
  t.equal(cachedDataFor(cache, Buffer.alloc(32, 2)), 'stale')
  t.equal(cachedDataFor(undefined, digest), 'missing')
  t.equal(cachedDataFor(Buffer.from('LDCC1\n'), digest), 'stale')
  t.equal(readFileSync(CACHED_SCRIPT, 'utf8').startsWith('"use strict"'), true, 'compiled as CommonJS')
})

t.test('codeCachePath() gives each set of node flags its own file beside the script', async t => {
  const path = (flags: string[], env: NodeJS.ProcessEnv = {}): string => execFileSync(process.execPath, [...flags, '-e', `console.log(require(${JSON.stringify(CACHED_SCRIPT)}).codeCachePath('/d/main.bundle.cjs'))`],
    { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '', ...env } }).trim()
  const plain = path([])
  t.match(plain, /^\/d\/main\.bundle\.[0-9a-f]{12}\.v8cache$/)
  t.equal(path([]), plain, 'the same flags, the same file')
  t.not(path(['--max-semi-space-size=1']), plain, 'other flags, another file')
  t.not(path([], { NODE_OPTIONS: '--max-old-space-size=100' }), plain, 'NODE_OPTIONS counts')
})
