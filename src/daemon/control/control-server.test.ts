/**
 * ControlServer on a real Unix socket: every line gets exactly one answer,
 * whatever it holds, and the connection stays usable. (The whole daemon
 * under a seeded fuzz: control-fuzz.test.ts.)
 */
import t from 'tap'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { ControlServer } from './control-server.js'
import { MAX_REQUEST_BYTES, type ControlHandlers } from '../client/control-protocol.js'

const dir = t.testdir()
const path = join(dir, 's.sock')
const logged: string[] = []
const handlers = {
  ping: async () => ({ pid: process.pid, home: dir, startedAt: 'now' }),
  mounts: async () => { throw new TypeError('a bug in a handler') }
} as unknown as ControlHandlers
const server = new ControlServer(handlers, line => logged.push(line))
await server.listen(path)
t.teardown(() => server.close())

/** Send `bytes` on a fresh connection and collect `n` answer lines. */
async function exchange (bytes: Buffer | string, n: number, socket?: Socket): Promise<Array<Record<string, any>>> {
  const s = socket ?? connect(path)
  const lines: Array<Record<string, any>> = []
  let buffered = ''
  return await new Promise((resolve, reject) => {
    const onData = (d: Buffer): void => {
      buffered += d.toString()
      let nl
      while ((nl = buffered.indexOf('\n')) !== -1) { lines.push(JSON.parse(buffered.slice(0, nl))); buffered = buffered.slice(nl + 1) }
      if (lines.length >= n) { s.off('data', onData); if (socket === undefined) s.destroy(); resolve(lines) }
    }
    s.on('data', onData)
    s.on('error', reject)
    s.write(bytes)
  })
}

t.test('ControlServer answers a JSON value that is not an object with ERR_BAD_REQUEST (the reported crash)', async t => {
  const answers = await exchange('null\n5\n"x"\n[1]\ntrue\n', 5)
  for (const a of answers) {
    t.equal(a.id, null)
    t.equal(a.error.code, 'ERR_BAD_REQUEST')
    t.match(a.error.message, /must be a JSON object/)
  }
  t.same((await exchange('{"id":9,"method":"ping"}\n', 1))[0]!.result.pid, process.pid, 'and goes on serving')
})

t.test('ControlServer answers a line over the limit, skips the rest of it, and keeps the connection', async t => {
  const s = connect(path)
  t.teardown(() => s.destroy())
  const big = Buffer.alloc(MAX_REQUEST_BYTES + 10, 0x20)
  const first = await exchange(big, 1, s)
  t.match(first[0]!.error.message, /longer than 1048576 bytes/)
  const [rest] = await exchange(Buffer.concat([Buffer.alloc(5000, 0x20), Buffer.from('\n{"id":2,"method":"ping"}\n')]), 1, s)
  t.equal(rest!.id, 2, 'the oversized line ended at its newline; the next request is served')
  t.ok('result' in rest!)
})

t.test('ControlServer answers bytes that are not UTF-8, and an empty line', async t => {
  const [a, b] = await exchange(Buffer.from([0x7b, 0xff, 0xfe, 0x7d, 0x0a, 0x0a]), 2)
  t.match(a!.error.message, /not valid UTF-8/)
  t.match(b!.error.message, /not valid JSON/)
})

t.test('ControlServer answers a handler that throws a non-LayerdError with ERR_INTERNAL and logs its stack', async t => {
  const [a] = await exchange('{"id":3,"method":"mounts"}\n', 1)
  t.same(a, { id: 3, error: { code: 'ERR_INTERNAL', message: 'a bug in a handler' } })
  t.match(logged.join('\n'), /control mounts: TypeError: a bug in a handler\n\s+at /)
})
