import t from 'tap'
import { CommandFailedError, LimitExceededError, UnsupportedError } from '../errors.js'
import { HostCommandError, collectHost, runHost, runHostBytes, runHostScript } from './host-command.js'

t.test('collectHost() resolves with status, stdout and stderr tail whatever the exit status', async t => {
  const r = await collectHost('sh', ['-c', 'cat; echo oops >&2; exit 3'], { input: 'in' })
  t.same({ code: r.code, signal: r.signal, timedOut: r.timedOut, stdout: r.stdout.toString(), stderr: r.stderr }, { code: 3, signal: null, timedOut: false, stdout: 'in', stderr: 'oops' })
  const env = await collectHost('sh', ['-c', 'printf %s "$X"'], { env: { X: 'given' } })
  t.equal(env.stdout.toString(), 'given', 'the environment passed, not ours')
})

t.test('runHost() names a failing command, its status and stderr (HostCommandError, a CommandFailedError)', async t => {
  const err = await runHost('sh', ['-c', 'echo first >&2; echo last >&2; exit 7']).catch(e => e)
  t.type(err, HostCommandError)
  t.type(err, CommandFailedError)
  t.notOk(err instanceof UnsupportedError, 'a failed command is not "unsupported"')
  t.equal(err.code, 'ERR_COMMAND_FAILED')
  t.equal(err.message, "sh -c echo first >&2; echo last >&2; exit 7 failed (exit 7): first | last")
  t.equal(err.exitCode, 7)
  t.equal(await runHost('sh', ['-c', 'echo ok']), 'ok\n')
  t.same(await runHostBytes('printf', ['\\001\\002']), Buffer.from([1, 2]))
  t.equal(await runHostScript('two steps', 'printf %s "$1"; printf %s "$2"', ['a b', '$c']), 'a b$c', 'parameters are never spliced into the script')
})

t.test('runHost() kills a command past its timeout; collectHost() stops one that prints too much', async t => {
  const err = await runHost('sleep', ['5'], { timeoutMs: 100, what: 'a sleeper' }).catch(e => e)
  t.type(err, HostCommandError)
  t.match(err.message, /^a sleeper failed \(timed out after 100 ms\)/)
  await t.rejects(collectHost('sh', ['-c', 'head -c 100000 /dev/zero'], { maxStdoutBytes: 1000 }), LimitExceededError)
})

t.test('collectHost() reports a missing program as UnsupportedError with the given hint', async t => {
  await t.rejects(collectHost('layerd-no-such-tool', []), { constructor: UnsupportedError, message: 'layerd-no-such-tool is not installed; run .ci/setup' })
  await t.rejects(runHost('layerd-no-such-tool', [], { missing: 'install the thing' }), { constructor: UnsupportedError, message: 'install the thing' })
})
