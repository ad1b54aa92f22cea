/**
 * checkRequestLine(): every line the control socket can receive gets a
 * checked request or a BadRequestError naming the method and the field.
 * (The real socket and daemon: control-fuzz.test.ts.)
 */
import t from 'tap'
import { BadRequestError } from '../client/control-protocol.js'
import { checkRequestLine } from './control-request.js'

function refused (line: string): { id: number | null, message: string } {
  const r = checkRequestLine(line)
  if (r.ok) throw new Error(`accepted: ${line}`)
  if (!(r.error instanceof BadRequestError)) throw new Error('not a BadRequestError')
  return { id: r.id, message: r.error.message }
}

t.test('checkRequestLine() refuses a line that is not a JSON object, naming what it got', async t => {
  t.match(refused('not json').message, /not valid JSON/)
  for (const [line, what] of [['null', 'null'], ['5', 'a number'], ['"ping"', 'a string'], ['true', 'a boolean'], ['[]', 'an array'], ['[{"id":1,"method":"ping"}]', 'an array']]) {
    const r = refused(line!)
    t.equal(r.id, null)
    t.match(r.message, new RegExp(`must be a JSON object .*got ${what}$`), line)
  }
})

t.test('checkRequestLine() refuses a missing or non-integer id, and a missing or non-string method', async t => {
  t.match(refused('{"method":"ping"}').message, /"id" must be an integer, got nothing/)
  t.match(refused('{"id":"1","method":"ping"}').message, /"id" must be an integer, got a string/)
  t.match(refused('{"id":1.5,"method":"ping"}').message, /"id" must be an integer, got a number/)
  t.match(refused('{"id":1e300,"method":"ping"}').message, /"id" must be an integer/)
  const noMethod = refused('{"id":7}')
  t.equal(noMethod.id, 7, 'an answer with a usable id carries it')
  t.match(noMethod.message, /request 7: "method" must be a string, got nothing/)
  t.match(refused('{"id":7,"method":["ping"]}').message, /"method" must be a string, got an array/)
})

t.test('checkRequestLine() treats prototype names as unknown methods and params', async t => {
  for (const name of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__', 'isPrototypeOf']) {
    t.match(refused(JSON.stringify({ id: 1, method: name })).message, new RegExp(`unknown method "${name}"; methods: ping, mount`), name)
  }
  t.match(refused('{"id":1,"method":"ping","params":{"__proto__":{"mountpoint":"/x"}}}').message, /\(ping\): unknown param "__proto__" \(it takes none\)/)
  t.match(refused('{"id":1,"method":"stats","params":{"constructor":1}}').message, /\(stats\): unknown param "constructor" \(it takes mountpoint\)/)
  t.match(refused('{"id":1,"method":"ping","__proto__":{}}').message, /unknown field "__proto__"/)
})

t.test('checkRequestLine() names the method and the field of a missing or mistyped param', async t => {
  t.match(refused('{"id":1,"method":"mount","params":null}').message, /request 1 \(mount\): "params" must be an object, got null/)
  t.match(refused('{"id":1,"method":"mount","params":[]}').message, /"params" must be an object, got an array/)
  t.match(refused('{"id":1,"method":"mount","params":{"mountpoint":"/m","store":"file:///s"}}').message, /\(mount\): params.image is missing \(a string\)/)
  t.match(refused('{"id":1,"method":"mount","params":{"image":5,"mountpoint":"/m","store":"s"}}').message, /\(mount\): params.image must be a string, got a number/)
  t.match(refused('{"id":1,"method":"mount","params":{"image":"a:b","mountpoint":"rel","store":"s"}}').message, /params.mountpoint must be an absolute path, got "rel"/)
  t.match(refused('{"id":1,"method":"mount","params":{"image":"a\\u0000b","mountpoint":"/m","store":"s"}}').message, /params.image must not contain a NUL/)
  t.match(refused('{"id":1,"method":"prefetch","params":{"mountpoint":"/m","wait":"yes"}}').message, /\(prefetch\): params.wait must be true or false, got a string/)
  t.match(refused('{"id":1,"method":"umount","params":{"mountpoint":{"a":1}}}').message, /params.mountpoint must be a string: an absolute path, got an object/)
})

t.test('checkRequestLine() quotes at most a short piece of a long name', async t => {
  const r = refused(JSON.stringify({ id: 1, method: 'x'.repeat(100_000) }))
  t.ok(r.message.length < 400, `${r.message.length} characters`)
})

t.test('checkRequestLine() accepts a well-formed request, params defaulting to {}', async t => {
  t.same(checkRequestLine('{"id":1,"method":"ping"}'), { ok: true, request: { id: 1, method: 'ping', params: {} } })
  const mount = checkRequestLine('{"id":2,"method":"mount","params":{"image":"a:v1","mountpoint":"/m","store":"file:///s"}}')
  t.ok(mount.ok)
  t.ok(checkRequestLine('{"id":3,"method":"stats","params":{}}').ok, 'an optional param may be absent')
})
