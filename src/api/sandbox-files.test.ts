/**
 * Paths of API file calls stay inside the sandbox root (openat2 RESOLVE_IN_ROOT
 * through the native addon): `..`, a planted absolute symlink to `/`, and a
 * /proc/<pid>/root link never reach the host's files.
 */
import t from 'tap'
import { mkdirSync, readFileSync, symlinkSync, writeFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { SandboxFiles } from './sandbox-files.js'

const root = t.testdir({ etc: { hostname: 'inside\n' }, tmp: {} })
symlinkSync('/', join(root, 'tmp', 'escape'))
symlinkSync('/proc/1/root', join(root, 'tmp', 'proc-root'))
mkdirSync(join(root, 'proc'))
const files = new SandboxFiles(root, '/')
t.teardown(() => files.close())

t.test('../../etc/shadow resolves inside the root (absent there)', async t => {
  await t.rejects(files.stat('../../etc/shadow'), { code: 'ENOENT' })
  t.throws(() => files.openRead('/../../../etc/shadow'), { code: 'ENOENT' })
  const { fd } = files.openRead('../../etc/hostname')
  t.equal(readFileSync(fd, 'utf8'), 'inside\n', '.. stops at the sandbox root')
})

t.test('an absolute symlink to / planted by the sandbox resolves inside the root', async t => {
  t.throws(() => files.openRead('/tmp/escape/etc/shadow'), { code: 'ENOENT' })
  const { fd } = files.openRead('/tmp/escape/etc/hostname')
  t.equal(readFileSync(fd, 'utf8'), 'inside\n')
  const w = await files.openWrite('/tmp/escape/planted')
  writeFileSync(w.fd, 'x')
  t.ok(existsSync(join(root, 'planted')), 'the write lands in the sandbox root')
  t.notOk(existsSync('/planted'), 'not in the host root')
})

t.test('/proc/1/root paths do not reach the host', async t => {
  t.throws(() => files.openRead('/proc/1/root/etc/hostname'), { code: 'ENOENT' })
  t.throws(() => files.openRead('/tmp/proc-root/etc/hostname'), { code: 'ENOENT' })
  await t.rejects(files.list('/tmp/proc-root', 1), { code: 'ENOENT' })
})

t.test('make dir, list, move, remove inside the root', async t => {
  t.equal(await files.makeDir('/a/b/c'), true)
  t.equal(await files.makeDir('/a/b/c'), false)
  const names = (await files.list('/a', 3)).map(e => e.path)
  t.same(names, ['/a/b', '/a/b/c'])
  await files.move('/a/b', '/a/d')
  t.equal((await files.stat('/a/d/c')).type, 'FILE_TYPE_DIRECTORY')
  await files.remove('/a')
  await t.rejects(files.stat('/a'), { code: 'ENOENT' })
  await t.rejects(files.remove('/'), /sandbox root/)
})
