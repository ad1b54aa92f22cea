import t from 'tap'
import { spawnSync } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { UsageError } from '../src/errors.js'
import { benchUsage, parseBenchArgs, type BenchOptions } from './bench-args.js'

const SPEC = {
  reps: { type: 'string', default: '5', value: 'N' },
  work: { type: 'string', value: 'DIR' },
  'no-profile': { type: 'boolean' },
  image: { type: 'string', multiple: true, value: 'PATH' }
} satisfies BenchOptions

t.test('parseBenchArgs() reads declared options, with defaults', async t => {
  const a = parseBenchArgs('x', SPEC, ['--reps', '10', '--no-profile', '--image', 'a', '--image', 'b'])
  t.equal(a.number('reps', { min: 1 }), 10)
  t.equal(a.flag('no-profile'), true)
  t.same(a.list('image'), ['a', 'b'])
  t.equal(a.optString('work'), undefined)
  const d = parseBenchArgs('x', SPEC, [])
  t.equal(d.number('reps'), 5, 'the default')
  t.equal(d.flag('no-profile'), false)
  t.same(d.list('image'), [])
})

t.test('parseBenchArgs() refuses a mistyped flag, a missing value and a positional, naming them', async t => {
  t.throws(() => parseBenchArgs('push-throughput', SPEC, ['--rep', '3']), { name: 'UsageError', message: /push-throughput: .*'--rep'/ })
  t.throws(() => parseBenchArgs('x', SPEC, ['--reps']), { message: /'--reps/ })
  t.throws(() => parseBenchArgs('x', SPEC, ['10']), { message: /'10'/ })
})

t.test('BenchArgs.number() refuses what is not a number in range, naming the flag', async t => {
  const a = parseBenchArgs('x', SPEC, ['--reps', 'ten'])
  t.throws(() => a.number('reps'), new UsageError('x: --reps must be an integer >= 0, got "ten"'))
  t.throws(() => parseBenchArgs('x', SPEC, ['--reps', '0']).number('reps', { min: 1 }), /--reps must be an integer >= 1, got "0"/)
  t.throws(() => parseBenchArgs('x', SPEC, ['--reps', '1.5']).number('reps'), /an integer/)
  t.equal(parseBenchArgs('x', SPEC, ['--reps', '1.5']).number('reps', { integer: false }), 1.5)
  t.throws(() => a.string('work'), /--work is required/)
})

t.test('benchUsage() lists every option', async t => {
  t.equal(benchUsage('x', SPEC), 'usage: node dist/bench/x.js [--reps N] [--work DIR] [--no-profile] [--image PATH]…')
})

t.test('a bench given a mistyped flag exits 2 with the usage before measuring anything', async t => {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'cold-start.js')
  const r = spawnSync(process.execPath, [script, '--rep', '3'], { encoding: 'utf8', timeout: 60_000 })
  t.equal(r.status, 2, r.stderr)
  t.match(r.stderr, /cold-start: .*'--rep'/)
  t.match(r.stderr, /usage: node dist\/bench\/cold-start\.js \[--reps N\] \[--work DIR\] \[--bandwidth BITS\] \[--rtt-ms MS\] \[--no-peers\] \[--s3 ENGINES\] \[--out DIR\]/)
  t.equal(r.stdout, '', 'nothing measured, nothing printed')
})
