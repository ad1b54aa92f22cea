import t from 'tap'
import { createLogger, parseLogLevel } from './logger.js'

function capture (format: 'text' | 'json', min: 'debug' | 'info' | 'warn' | 'error'): { log: ReturnType<typeof createLogger>, lines: string[] } {
  const lines: string[] = []
  return { log: createLogger(format, min, line => { lines.push(line) }), lines }
}

t.test('createLogger() logs at the level the caller says, never one guessed from the words', async t => {
  const { log, lines } = capture('text', 'debug')
  log('mount failed: cannot reach the store')
  log('store unavailable', 'warn')
  log('shutdown', 'error')
  log('detail', 'debug')
  t.match(lines[0], /^\S+Z mount failed: cannot reach the store\n$/, 'no level given: info, whatever the words')
  t.match(lines[1], /^\S+Z WARN store unavailable\n$/)
  t.match(lines[2], /^\S+Z ERROR shutdown\n$/)
  t.match(lines[3], /^\S+Z DEBUG detail\n$/)
})

t.test('createLogger() drops lines below its floor, in both formats', async t => {
  const text = capture('text', 'warn')
  text.log('ordinary')
  text.log('odd', 'warn')
  t.equal(text.lines.length, 1)
  const json = capture('json', 'info')
  json.log('quiet', 'debug')
  json.log('ok')
  json.log.at('error', 'broken', { mount: '/m' })
  t.same(json.lines.map(l => JSON.parse(l)).map(({ level, msg, mount }) => ({ level, msg, mount })), [
    { level: 'info', msg: 'ok', mount: undefined },
    { level: 'error', msg: 'broken', mount: '/m' }
  ])
  t.throws(() => parseLogLevel('loud'), /invalid --log-level "loud"/)
})
