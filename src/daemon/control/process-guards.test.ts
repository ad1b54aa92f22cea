/**
 * installProcessGuards() in a real process: an unhandled rejection is
 * logged with its stack and counted and the process goes on; an uncaught
 * exception is logged with its stack and cause and ends the process with
 * the fatal exit code.
 */
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const GUARDS = fileURLToPath(new URL('./process-guards.js', import.meta.url))
const FATAL = 5

function runScript (body: string): { status: number | null, stderr: string, stdout: string } {
  const script = `import { installProcessGuards, unhandledRejectionCount } from ${JSON.stringify(GUARDS)}
installProcessGuards(line => process.stderr.write(line + '\\n'), ${FATAL})
${body}`
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 })
  return { status: r.status, stderr: r.stderr, stdout: r.stdout }
}

t.test('installProcessGuards(): an unhandled rejection is logged with its stack and counted; the process goes on', async t => {
  const r = runScript(`
Promise.reject(new Error('nobody awaited me', { cause: new Error('the disk said EIO') }))
setTimeout(() => { console.log('still running, count', unhandledRejectionCount()); process.exit(0) }, 100)`)
  t.equal(r.status, 0, r.stderr)
  t.match(r.stdout, /still running, count 1/)
  t.match(r.stderr, /unhandled rejection #1 \(a bug; layerd goes on serving\): Error: nobody awaited me\n\s+at /)
  t.match(r.stderr, /caused by: Error: the disk said EIO/)
})

t.test('installProcessGuards(): an uncaught exception is logged with its stack and exits with the fatal code', async t => {
  const r = runScript(`
setTimeout(() => { throw new TypeError('half-way through a step') }, 10)
setTimeout(() => { console.log('should not run') }, 2000)`)
  t.equal(r.status, FATAL)
  t.notMatch(r.stdout, /should not run/)
  t.match(r.stderr, /fatal: uncaught exception, exiting with code 5: TypeError: half-way through a step\n\s+at /)
})
