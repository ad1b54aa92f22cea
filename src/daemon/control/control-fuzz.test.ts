/**
 * The control socket under a seeded fuzz (issue 19): a real layerd, its
 * real socket, a real mount. Every JSON value type as a request, wrong
 * param types, missing and unknown fields, prototype names as methods and
 * params, deep nesting, oversized and non-UTF-8 lines, random bytes, and
 * many connections at once. Each line gets exactly one answer, a clear
 * error (never ERR_INTERNAL), and layerd stays up: the same pid, still
 * serving the mount's reads with the right bytes (sha256).
 *
 * LAYERD_FUZZ_SEED=N reproduces a run (the seed is in the test name);
 * LAYERD_FUZZ_CASES sets how many random requests (default 3000).
 */
import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { dir, largeFile, writeLayerTar } from '../../../fixtures/layer-dsl.js'
import { layerdNode } from '../../../fixtures/layerd-harness.js'
import { SeededByteStream, seededBytes } from '../../../fixtures/seeded-bytes.js'
import { CONTROL_PARAMS, MAX_REQUEST_BYTES, socketPath, type ControlMethod } from '../client/control-protocol.js'

const SEED = Number(process.env.LAYERD_FUZZ_SEED ?? 19)
const CASES = Number(process.env.LAYERD_FUZZ_CASES ?? 3000)
const CONNECTIONS = 200
const FILES = 24
const FILE_BYTES = 300_000

const work = t.testdir()
const node = layerdNode(join(work, 'h'))
t.teardown(() => node.stopDaemon())
const tar = join(work, 'fuzz.tar')
await writeLayerTar(tar, [dir('data'), ...Array.from({ length: FILES }, (_, i) => largeFile(`data/f${i}`, FILE_BYTES, `fuzz-${i}`))])
const daemonLog: string[] = []
const daemon = await node.startDaemon()
daemon.stderr!.on('data', (c: Buffer) => daemonLog.push(c.toString()))
// No assertion out here: one would end the root test (and remove its test dir) before the subtests run.
for (const args of [['push', tar, 'fuzz/data:v1'], ['mount', 'fuzz/data:v1', join(work, 'mnt')]]) {
  const r = await node.layerctl(...args)
  if (r.code !== 0) throw new Error(`layerctl ${args.join(' ')}: ${r.stderr}`)
}
const mnt = join(work, 'mnt')
const pid = await node.daemonPid()
let nextFile = 0

/** Read a file of the mount not read before (so the read reaches the daemon) and check its bytes. */
async function daemonServesReads (): Promise<boolean> {
  const i = nextFile++ % FILES
  const got = await readFile(join(mnt, 'data', `f${i}`))
  const want = seededBytes(`fuzz-${i}`, FILE_BYTES)
  return createHash('sha256').update(got).digest('hex') === createHash('sha256').update(want).digest('hex')
}

/** A small seeded generator over SeededByteStream: same seed, same cases. */
class Rng {
  readonly #bytes: SeededByteStream
  constructor (seed: number) { this.#bytes = new SeededByteStream(`control-fuzz-${seed}`) }
  int (n: number): number { return this.#bytes.next(4).readUInt32LE(0) % n }
  pick<T> (xs: readonly T[]): T { return xs[this.int(xs.length)]! }
  bytes (n: number): Buffer { return this.#bytes.next(n) }
  string (): string {
    return this.pick([
      '', 'x', '/', '/tmp/nope-fuzz', 'rel/path', 'fuzz/nope:v1', 'Bad:Name', 'file:///nonexistent-fuzz-store',
      'ftp://x', '\u0000', 'a\u0000b', '../../etc', '\ud83d\ude00', 'é'.repeat(50), '%s%n', '${x}', '__proto__'
    ])
  }
}

const PROTOTYPE_NAMES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf',
  'propertyIsEnumerable', 'toLocaleString', '__defineGetter__', '__lookupSetter__', 'prototype']
const METHODS = Object.keys(CONTROL_PARAMS) as ControlMethod[]

/** A JSON value of each type, nested up to `depth`. */
function jsonValue (r: Rng, depth = 2): unknown {
  switch (r.int(depth > 0 ? 8 : 6)) {
    case 0: return null
    case 1: return r.int(2) === 0
    case 2: return r.pick([0, -1, 1.5, 1e308, -0, 2 ** 53 + 2, 42])
    case 3: return r.string()
    case 4: return r.pick([[], {}])
    case 5: return r.pick(PROTOTYPE_NAMES)
    case 6: return Array.from({ length: r.int(4) }, () => jsonValue(r, depth - 1))
    default: return Object.fromEntries(Array.from({ length: r.int(4) }, () => [r.pick([...PROTOTYPE_NAMES, 'a', 'image', 'mountpoint']), jsonValue(r, depth - 1)]))
  }
}

/** One random request line, always malformed (so never, by chance, a valid shutdown or umount). */
function randomLine (r: Rng, id: number): string {
  const method = r.pick(METHODS)
  const spec = CONTROL_PARAMS[method] as Record<string, string>
  const params: Record<string, unknown> = {}
  for (const [k, kind] of Object.entries(spec)) {
    // A value of the right type for some fields, anything for others.
    params[k] = r.int(3) === 0 ? jsonValue(r) : kind.startsWith('boolean') ? r.int(2) === 0 : kind.startsWith('number') ? r.int(1000) : r.string()
  }
  switch (r.int(9)) {
    case 0: return JSON.stringify(jsonValue(r, 3))
    case 1: return JSON.stringify({ id, method: r.pick(PROTOTYPE_NAMES), params })
    case 2: return JSON.stringify({ id, method: jsonValue(r), params })
    case 3: { const bad = jsonValue(r); return JSON.stringify({ id: Number.isSafeInteger(bad) ? 1.5 : bad, method, params }) }
    case 4: { const p = jsonValue(r); return JSON.stringify({ id, method, params: typeof p === 'object' && p !== null && !Array.isArray(p) ? [p] : p }) }
    case 5: { const keys = Object.keys(params); if (keys.length > 0) delete params[r.pick(keys)]; return JSON.stringify({ id, method, params: { ...params, [r.pick(PROTOTYPE_NAMES)]: 1 } }) }
    case 6: return `{"id":${id},"method":"${method}","params":{"__proto__":${JSON.stringify(params)}}}`
    case 7: return r.bytes(1 + r.int(64)).toString('latin1').replace(/\n/g, ' ')
    default: return JSON.stringify({ id, method, params, [r.pick(['extra', ...PROTOTYPE_NAMES])]: true })
  }
}

interface Answer { id: number | null, result?: unknown, error?: { code: string, message: string } }

/** A connection that sends lines and collects answers, in order of arrival. */
class Conn {
  readonly socket: Socket
  readonly answers: Answer[] = []
  #buffered = ''
  #waiters: Array<() => void> = []
  constructor () {
    this.socket = connect(socketPath(node.home))
    this.socket.on('data', (d: Buffer) => {
      this.#buffered += d.toString()
      let nl
      while ((nl = this.#buffered.indexOf('\n')) !== -1) {
        this.answers.push(JSON.parse(this.#buffered.slice(0, nl)) as Answer)
        this.#buffered = this.#buffered.slice(nl + 1)
      }
      for (const w of this.#waiters.splice(0)) w()
    })
    this.socket.on('error', () => {})
  }

  /** Send, then wait until `n` answers in all have arrived (or the connection closed). */
  async send (bytes: string | Buffer, n: number, timeoutMs = 30_000): Promise<Answer[]> {
    this.socket.write(bytes)
    const deadline = Date.now() + timeoutMs
    while (this.answers.length < n) {
      if (Date.now() > deadline || this.socket.destroyed) throw new Error(`${this.answers.length} of ${n} answers after ${timeoutMs} ms`)
      await new Promise<void>(resolve => { this.#waiters.push(resolve); setTimeout(resolve, 200) })
    }
    return this.answers.slice(0, n)
  }

  close (): void { this.socket.destroy() }
}

/** Every answer is a clear refusal: a known error code, never ERR_INTERNAL, a message that says what. */
function checkRefusal (t: Test, a: Answer, line: string): boolean {
  const ok = a.error !== undefined && a.error.code !== 'ERR_INTERNAL' && /^ERR_[A-Z_]+$/.test(a.error.code) && a.error.message.length > 10
  if (!ok) t.fail(`line ${JSON.stringify(line.slice(0, 200))} got ${JSON.stringify(a).slice(0, 400)}`)
  return ok
}

t.test(`the control socket refuses ${CASES} seeded random requests (seed ${SEED}) and layerd keeps serving`, async t => {
  const r = new Rng(SEED)
  const c = new Conn()
  t.teardown(() => c.close())
  let refused = 0
  for (let i = 0; i < CASES; i++) {
    const line = randomLine(r, 1000 + i)
    const [a] = (await c.send(line + '\n', i + 1)).slice(i)
    if (checkRefusal(t, a!, line)) refused++
    if (i % 500 === 499) t.ok(await daemonServesReads(), `after ${i + 1} requests the mount still reads right`)
  }
  t.equal(refused, CASES, 'every one answered with a clear error')
  t.equal(await node.daemonPid(), pid, 'the same layerd')
})

t.test('every JSON value type as a whole request, and each method with each param missing or mistyped, names the method and field', async t => {
  const c = new Conn()
  t.teardown(() => c.close())
  const lines: Array<[string, RegExp]> = [
    ['null', /must be a JSON object .*got null/], ['true', /got a boolean/], ['0', /got a number/], ['"ping"', /got a string/],
    ['[]', /got an array/], ['{}', /"id" must be an integer, got nothing/], ['{"id":1}', /"method" must be a string, got nothing/]
  ]
  for (const name of PROTOTYPE_NAMES) lines.push([JSON.stringify({ id: 2, method: name }), new RegExp(`unknown method ${JSON.stringify(name).replace(/[$()*+.?[\\\]^{|}]/g, '\\$&')}`)])
  for (const method of METHODS) {
    const spec = CONTROL_PARAMS[method] as Record<string, string>
    const good = Object.fromEntries(Object.entries(spec).map(([k, kind]) => [k, kind.startsWith('boolean') ? true : kind.startsWith('number') ? 1 : '/fuzz-nope']))
    for (const [k, kind] of Object.entries(spec)) {
      if (!kind.endsWith('?')) {
        const { [k]: _dropped, ...missing } = good
        lines.push([JSON.stringify({ id: 3, method, params: missing }), new RegExp(`\\(${method}\\): params\\.${k} is missing`)])
      }
      const wrongs = kind.startsWith('number') ? [null, 'seven', [], {}, false, -1] : [null, 7, [], {}, kind.startsWith('boolean') ? 'yes' : false]
      for (const wrong of wrongs) {
        lines.push([JSON.stringify({ id: 4, method, params: { ...good, [k]: wrong } }), new RegExp(`\\(${method}\\): params\\.${k} must be`)])
      }
    }
    lines.push([JSON.stringify({ id: 5, method, params: { ...good, bogus: 1 } }), new RegExp(`\\(${method}\\): unknown param "bogus"`)])
    lines.push([JSON.stringify({ id: 6, method, params: 'x' }), new RegExp(`\\(${method}\\): "params" must be an object, got a string`)])
  }
  // Well-formed, but naming things that are not there or not allowed: the handler's own error, never ERR_INTERNAL.
  const store = 'file:///nonexistent-fuzz-store'
  const semantic: Array<Record<string, unknown>> = [
    { method: 'mount', params: { image: 'fuzz/nope:v1', mountpoint: join(work, 'nope-mnt'), store } },
    { method: 'mount', params: { image: 'Bad:Name', mountpoint: join(work, 'nope-mnt'), store } },
    { method: 'mount', params: { image: 'fuzz/data:v1', mountpoint: '/nonexistent-fuzz/x', store: 'ftp://x' } },
    { method: 'mount', params: { image: 'fuzz/data:v1', mountpoint: mnt, store: node.store } },
    { method: 'umount', params: { mountpoint: '/nonexistent-fuzz' } },
    { method: 'stats', params: { mountpoint: '/' } },
    { method: 'prefetch', params: { mountpoint: '/tmp' } },
    { method: 'image', params: { image: '', store } },
    { method: 'blockView', params: { image: 'fuzz/nope:v1', store } },
    { method: 'pull', params: { image: 'fuzz/nope:v1', store, s3Endpoint: 'not a url' } },
    { method: 'export', params: { image: 'fuzz/nope:v1', store } },
    { method: 'export', params: { image: 'fuzz/nope:v1', store, tarFile: '/nonexistent-fuzz/x.tar', directory: '/nonexistent-fuzz/d' } },
    { method: 'export', params: { image: 'fuzz/data:v1', store: node.store, tarFile: '/nonexistent-fuzz/x.tar' } },
    { method: 'containerdPull', params: { image: 'fuzz/nope:v1', address: '/nonexistent-fuzz/containerd.sock', namespace: 'default', store } },
    { method: 'containerdPull', params: { image: 'fuzz/data:v1', address: '/nonexistent-fuzz/containerd.sock', namespace: 'default', store: node.store } },
    { method: 'containerdPull', params: { image: 'fuzz/data:v1', address: '/nonexistent-fuzz/containerd.sock', namespace: 'no spaces\u00e9', store: node.store } },
    { method: 'containerdPull', params: { image: 'docker://localhost:1/x:y', address: '/nonexistent-fuzz/containerd.sock', namespace: 'default', store } }
  ]
  for (const [i, req] of semantic.entries()) {
    const a = (await c.send(JSON.stringify({ id: 9000 + i, ...req }) + '\n', i + 1))[i]!
    t.ok(a.id === 9000 + i && checkRefusal(t, a, JSON.stringify(req)), `${req.method} ${JSON.stringify(req.params)} → ${a.error?.code}: ${a.error?.message.slice(0, 120)}`)
  }
  c.answers.splice(0)
  const answers = await c.send(lines.map(([l]) => l + '\n').join(''), lines.length)
  // Refusals are answered synchronously, in order.
  lines.forEach(([line, pattern], i) => {
    const a = answers[i]!
    if (!(a.error?.code === 'ERR_BAD_REQUEST' && pattern.test(a.error.message))) t.fail(`${line} → ${JSON.stringify(a)} (wanted ${String(pattern)})`)
  })
  t.pass(`${lines.length} malformed requests each refused with ERR_BAD_REQUEST naming the method and the field`)
  t.ok(await daemonServesReads())
})

t.test('deep nesting, oversized lines and non-UTF-8 lines are answered; the connection stays usable', async t => {
  const c = new Conn()
  t.teardown(() => c.close())
  const depth = 400_000
  const cases: Array<[string | Buffer, RegExp]> = [
    ['['.repeat(depth) + ']'.repeat(depth) + '\n', /must be a JSON object/],
    [`{"id":1,"method":"ping","params":{"a":${'['.repeat(depth)}${']'.repeat(depth)}}}\n`, /unknown param "a"/],
    [`{"id":1,"method":"ping","params":${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}}\n`, /unknown param "a"/],
    ['['.repeat(depth) + '\n', /not valid JSON/],
    [Buffer.concat([Buffer.alloc(MAX_REQUEST_BYTES + 1, 0x7b), Buffer.from('\n')]), /longer than 1048576 bytes/],
    [Buffer.alloc(3 * MAX_REQUEST_BYTES, 0x41), /longer than 1048576 bytes/],
    ['\n', /not valid JSON/], // ends the oversized line above: skipped, not answered
    [Buffer.from([0xc3, 0x28, 0x0a]), /not valid UTF-8/],
    [Buffer.from([0xed, 0xa0, 0x80, 0x0a]), /not valid UTF-8/], // an encoded surrogate
    [Buffer.from([0xc0, 0xaf, 0x0a]), /not valid UTF-8/], // an overlong '/'
    [Buffer.from([0x22, 0xff, 0x22, 0x0a]), /not valid UTF-8/]
  ]
  let n = 0
  for (const [bytes, pattern] of cases) {
    if (bytes === '\n') { await c.send(bytes, n); continue } // no answer for the rest of a skipped line
    n++
    const a = (await c.send(bytes, n))[n - 1]!
    t.equal(a.error?.code, 'ERR_BAD_REQUEST', `${String(pattern)}`)
    t.match(a.error?.message, pattern)
  }
  const ping = (await c.send('{"id":77,"method":"ping"}\n', n + 1))[n]!
  t.same(ping.id, 77, 'the same connection still serves a real request')
  t.equal((ping.result as { pid: number }).pid, pid)
  t.ok(await daemonServesReads())
})

t.test(`${CONNECTIONS} connections at once, each sending a seeded mix, are all answered`, async t => {
  const r = new Rng(SEED + 1)
  const conns = Array.from({ length: CONNECTIONS }, () => new Conn())
  t.teardown(() => { for (const c of conns) c.close() })
  const per = 10
  const results = await Promise.all(conns.map(async (c, k) => {
    const lines = Array.from({ length: per }, (_, i) => randomLine(r, k * 100 + i))
    const answers = await c.send(lines.map(l => l + '\n').join('') + `{"id":${k},"method":"ping"}\n`, per + 1)
    const refused = answers.filter(a => a.error !== undefined && a.error.code !== 'ERR_INTERNAL').length
    const pinged = answers.some(a => a.id === k && (a.result as { pid?: number } | undefined)?.pid === pid)
    return { refused, pinged }
  }))
  t.equal(results.reduce((s, x) => s + x.refused, 0), CONNECTIONS * per, 'every random line refused')
  t.ok(results.every(x => x.pinged), 'every connection also got its ping answered by the same layerd')
  t.ok(await daemonServesReads())
})

t.test('after the fuzz: the same layerd, no internal error or unhandled rejection in its log, the mount right', async t => {
  t.equal(await node.daemonPid(), pid)
  const stats = JSON.parse((await node.layerctl('stats', '--json')).stdout)
  t.equal(stats.daemon.pid, pid)
  t.equal(stats.daemon.unhandledRejections, 0)
  const log = daemonLog.join('')
  t.notMatch(log, /unhandled rejection|fatal:|control \w+: \w*Error/, 'nothing in the log a request caused')
  for (let i = 0; i < 3; i++) t.ok(await daemonServesReads())
  t.equal((await node.layerctl('umount', mnt)).code, 0)
  // Stop it here, not only in the root teardown: the daemon's stderr pipe keeps this process alive,
  // so the root test would never end and its teardown would never run.
  await node.stopDaemon()
})
