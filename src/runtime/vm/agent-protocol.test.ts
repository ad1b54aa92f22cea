/**
 * The host side of the agent protocol: frames split anywhere still decode,
 * hostile frames are refused, and exec requests are encoded as the agent
 * parses them.
 */
import t from 'tap'
import { FrameDecoder, Frame, decodeAgentError, decodeExit, decodeReady, encodeExecRequest, encodeFrame } from './agent-protocol.js'

t.test('FrameDecoder.push() returns each frame once whole, however the stream is split', async t => {
  const stream = Buffer.concat([
    encodeFrame(Frame.READY, Buffer.from('version=1\nkernel=6.1\n')),
    encodeFrame(Frame.STDOUT, Buffer.from([0, 1, 2, 255])),
    encodeFrame(Frame.STDERR),
    encodeFrame(Frame.EXIT, Buffer.from('7\u00000\u0000'))
  ])
  for (const step of [1, 3, 5, 64]) {
    const d = new FrameDecoder()
    const frames = []
    for (let at = 0; at < stream.length; at += step) frames.push(...d.push(stream.subarray(at, at + step)))
    t.same(frames.map(f => [f.type, [...f.payload]]), [
      [Frame.READY, [...Buffer.from('version=1\nkernel=6.1\n')]],
      [Frame.STDOUT, [0, 1, 2, 255]],
      [Frame.STDERR, []],
      [Frame.EXIT, [...Buffer.from('7\u00000\u0000')]]
    ], `split every ${step} bytes`)
    t.equal(d.bufferedBytes, 0)
  }
})

t.test('FrameDecoder.push() refuses a frame longer than its limit', async t => {
  const d = new FrameDecoder(1024)
  const head = Buffer.alloc(5)
  head[0] = Frame.STDOUT
  head.writeUInt32LE(1025, 1)
  t.throws(() => d.push(head), { code: 'ERR_CORRUPT_OBJECT' })
})

t.test('decodeExit(), decodeReady() and decodeAgentError() read what the agent sends and refuse garbage', async t => {
  t.same(decodeExit(Buffer.from('137\u00009\u0000')), { exitCode: 137, signal: 9 })
  t.same(decodeExit(Buffer.from('0\u00000\u0000')), { exitCode: 0 })
  t.throws(() => decodeExit(Buffer.from('x\u00000\u0000')), { code: 'ERR_CORRUPT_OBJECT' })
  t.throws(() => decodeExit(Buffer.from('1')), { code: 'ERR_CORRUPT_OBJECT' })
  t.same(decodeReady(Buffer.from('version=1\nrootFreeBytes=42\njunk\n')), { version: '1', rootFreeBytes: '42' })
  t.same(decodeAgentError(Buffer.from('user\nuser x: no such user')), { kind: 'user', message: 'user x: no such user' })
})

t.test('encodeExecRequest() writes NUL-terminated fields and refuses what the agent cannot take', async t => {
  const p = encodeExecRequest({ argv: ['sh', '-c', 'echo é'], env: ['A=1'], cwd: '/root', user: 'daemon', hostTimeMs: 1234.4 })
  t.same(p.toString().split('\0'), ['3', 'sh', '-c', 'echo é', '1', 'A=1', '/root', 'daemon', '1234', ''])
  t.throws(() => encodeExecRequest({ argv: [], env: [], cwd: '/', user: '', hostTimeMs: 0 }), { code: 'ERR_BAD_INPUT' })
  t.throws(() => encodeExecRequest({ argv: ['a\u0000b'], env: [], cwd: '/', user: '', hostTimeMs: 0 }), { code: 'ERR_BAD_INPUT' })
  t.throws(() => encodeExecRequest({ argv: ['x'], env: Array.from({ length: 9000 }, (_, i) => `K${i}=v`), cwd: '/', user: '', hostTimeMs: 0 }), { code: 'ERR_BAD_INPUT' })
})
