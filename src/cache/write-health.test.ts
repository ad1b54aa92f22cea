/**
 * CacheWriteHealth: one log line per episode, probes with a doubling
 * interval, everything admitted again after the first commit that succeeds.
 * (A real full filesystem under a real daemon: src/daemon/cache-disk-full.test.ts.)
 */
import t from 'tap'
import { CacheWriteHealth, describeWriteFailure } from './write-health.js'

function eio (): Error {
  return Object.assign(new Error('Input/output error'), { code: 'EIO' })
}

t.test('CacheWriteHealth admits everything while writes work', async t => {
  const h = new CacheWriteHealth({ location: '/c', log: () => {} })
  for (let i = 0; i < 5; i++) t.equal(h.admit(), true)
  h.succeeded()
  t.same(h.stats(), { writeFailures: 0, skippedWrites: 0, writesFailing: false })
})

t.test('CacheWriteHealth logs an episode once, skips but for one probe per interval, doubles the interval, and resumes on success', async t => {
  let now = 1_000_000
  const lines: string[] = []
  const h = new CacheWriteHealth({ location: '/c', log: l => lines.push(l), clock: () => now, probeIntervalMs: 1000, maxProbeIntervalMs: 4000 })
  t.equal(h.failed(eio()), true, 'the first failure starts an episode')
  t.equal(h.failed(eio()), false, 'a second one does not')
  t.equal(lines.length, 1)
  t.match(lines[0], /chunk cache \/c cannot write \(EIO: Input\/output error\): serving chunks without caching them/)
  t.equal(h.admit(), false, 'new entries are skipped')
  t.equal(h.admit(), false)
  now += 2000 // the second failure doubled the interval to 2 s
  t.equal(h.admit(), true, 'one probe once the interval is over')
  t.equal(h.admit(), false, 'and only one')
  h.failed(eio())
  now += 3999
  t.equal(h.admit(), false, 'the interval doubled again, to its 4 s cap')
  now += 1
  t.equal(h.admit(), true)
  t.same(h.stats(), { writeFailures: 3, skippedWrites: 4, writesFailing: true })
  now += 500
  h.succeeded()
  t.match(lines[1], /chunk cache \/c writes again after 6\.5 s: caching resumed \(4 entries were served without caching meanwhile\)/)
  t.equal(h.admit(), true)
  t.equal(h.admit(), true, 'everything is admitted again')
  t.same(h.stats(), { writeFailures: 3, skippedWrites: 4, writesFailing: false })
  h.succeeded()
  t.equal(lines.length, 2, 'nothing more is logged')
})

t.test('describeWriteFailure() names the errno code and the causes', async t => {
  t.equal(describeWriteFailure(eio()), 'EIO: Input/output error')
  t.equal(describeWriteFailure(new Error('cannot store', { cause: eio() })), 'cannot store: EIO: Input/output error')
  t.equal(describeWriteFailure('x'), 'x')
})
