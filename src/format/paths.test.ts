import t from 'tap'
import { MAX_NAME_BYTES, MAX_PATH_BYTES, baseName, isNormalizedPath, joinPath, normalizeEntryPath, parentPath, symlinkEscapesRoot } from './paths.js'

t.test('normalizeEntryPath() makes names relative and canonical, and says when it removed a leading /', async t => {
  t.same(normalizeEntryPath('./usr//lib/./x/'), { ok: true, path: 'usr/lib/x', wasAbsolute: false })
  t.same(normalizeEntryPath('/etc/passwd'), { ok: true, path: 'etc/passwd', wasAbsolute: true })
  t.same(normalizeEntryPath('./'), { ok: true, path: '', wasAbsolute: false }, 'the root')
})

t.test('normalizeEntryPath() refuses .., NUL, and over-long components and paths, with the reason', async t => {
  t.same(normalizeEntryPath('usr/lib/../../etc'), { ok: false, reason: "contains a '..' component" })
  t.same(normalizeEntryPath('a\0b'), { ok: false, reason: 'contains a NUL byte' })
  t.same(normalizeEntryPath(`a/${'n'.repeat(MAX_NAME_BYTES + 1)}`), { ok: false, reason: `has a component longer than ${MAX_NAME_BYTES} bytes` })
  t.same(normalizeEntryPath(`${'é'.repeat(128)}`), { ok: false, reason: `has a component longer than ${MAX_NAME_BYTES} bytes` }, 'bytes, not characters')
  t.equal(normalizeEntryPath(`a/${'n'.repeat(MAX_NAME_BYTES)}`).ok, true)
  const long = Array.from({ length: 18 }, () => 'n'.repeat(240)).join('/')
  t.same(normalizeEntryPath(long), { ok: false, reason: `is longer than ${MAX_PATH_BYTES} bytes` })
})

t.test('isNormalizedPath() accepts only the normalized form', async t => {
  t.ok(isNormalizedPath(''))
  t.ok(isNormalizedPath('usr/lib'))
  for (const p of ['/usr', 'usr/', 'usr//lib', './usr', 'usr/../etc', 'a\0']) t.notOk(isNormalizedPath(p), p)
})

t.test('parentPath(), baseName() and joinPath() on normalized paths', async t => {
  t.equal(parentPath(''), undefined)
  t.equal(parentPath('usr'), '')
  t.equal(parentPath('usr/lib/x'), 'usr/lib')
  t.equal(baseName('usr/lib/x'), 'x')
  t.equal(baseName('usr'), 'usr')
  t.equal(joinPath('', 'usr'), 'usr')
  t.equal(joinPath('usr', 'lib'), 'usr/lib')
})

t.test('symlinkEscapesRoot() is true only for relative targets that climb above the root', async t => {
  t.equal(symlinkEscapesRoot('usr/bin/x', '../lib/y'), false)
  t.equal(symlinkEscapesRoot('usr/bin/x', '../../etc'), false, 'reaches the root, not above it')
  t.equal(symlinkEscapesRoot('usr/bin/x', '../../../etc'), true)
  t.equal(symlinkEscapesRoot('x', '../y'), true)
  t.equal(symlinkEscapesRoot('usr/x', 'a/../../..'), true)
  t.equal(symlinkEscapesRoot('x', '/../../etc'), false, 'absolute targets resolve against the image root')
})
