import t from 'tap'
import { readFileSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as errors from './errors.js'
import { ERROR_CLASSES, InternalError, LayerdError, NotFoundError, UsageError, asLayerdError, withContext } from './errors.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

function sources (dir: string): string[] {
  return readdirSync(dir).flatMap(name => {
    const p = join(dir, name)
    if (statSync(p).isDirectory()) return sources(p)
    return p.endsWith('.ts') && !p.endsWith('.test.ts') ? [p] : []
  })
}

t.test('ERROR_CLASSES lists every LayerdError subclass of src/errors.ts, each with its own code', async t => {
  const exported = (Object.values(errors) as unknown[]).filter((v): v is errors.LayerdErrorClass => typeof v === 'function' && v.prototype instanceof LayerdError)
  t.same(exported.map(c => c.code).sort(), [...ERROR_CLASSES.keys()].sort())
  for (const [code, Cls] of ERROR_CLASSES) {
    const e = new Cls('m', { cause: 'c' })
    t.equal(e.code, code)
    t.equal(e.name, Cls.name)
    t.equal(e.cause, 'c')
    t.match(code, /^ERR_[A-Z_]+$/)
  }
})

t.test('no module outside src/errors.ts defines an error code: no other LayerdError subclass, no ad-hoc new LayerdError(code)', async t => {
  const offenders: string[] = []
  for (const dir of ['src', 'cli', 'layerd']) {
    for (const file of sources(join(ROOT, dir))) {
      if (file.endsWith(join('src', 'errors.ts'))) continue
      const text = readFileSync(file, 'utf8')
      if (/extends LayerdError\b/.test(text)) offenders.push(`${file}: extends LayerdError`)
      // The control client re-creates an error from a newer daemon whose code this build does not know.
      for (const m of text.matchAll(/new LayerdError\(([^,)]*)/g)) offenders.push(`${file}: new LayerdError(${m[1]}`)
    }
  }
  t.same(offenders, [])
})

t.test('README.md documents every code', async t => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  t.same([...ERROR_CLASSES.keys()].filter(code => !readme.includes(`\`${code}\``)), [])
})

t.test('withContext() keeps the class and code and puts the original as cause; asLayerdError() wraps only what is not a LayerdError', async t => {
  const inner = new UsageError('access denied')
  const outer = withContext(inner, 'cannot fetch chunk x')
  t.type(outer, UsageError)
  t.equal(outer.message, 'cannot fetch chunk x: access denied')
  t.equal(outer.cause, inner)
  const unknown = withContext(new LayerdError('ERR_FROM_A_NEWER_DAEMON', 'odd'), 'ctx')
  t.equal(unknown.code, 'ERR_FROM_A_NEWER_DAEMON')
  const nf = new NotFoundError('gone')
  t.equal(asLayerdError(nf, 'ctx'), nf)
  const bug = new TypeError('x is undefined')
  const wrapped = asLayerdError(bug, 'reading y')
  t.type(wrapped, InternalError)
  t.equal(wrapped.message, 'reading y: x is undefined')
  t.equal(wrapped.cause, bug)
})
