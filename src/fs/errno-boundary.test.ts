import t from 'tap'
import { constants as osConstants } from 'node:os'
import { BadInputError, CacheIoError, CorruptObjectError, InternalError, NotFoundError, StoreUnavailableError, UnsupportedError, UsageError } from '../errors.js'
import { ErrnoBoundary, LOG_BURST_LINES } from './errno-boundary.js'

const E = osConstants.errno

function boundary (): { b: ErrnoBoundary, lines: string[] } {
  const lines: string[] = []
  return { b: new ErrnoBoundary({ log: l => lines.push(l), storeName: 's3://bucket/x', mountpoint: '/mnt/img' }), lines }
}

t.test('ErrnoBoundary.errno() maps layerd errors to negative errno values', async t => {
  const { b, lines } = boundary()
  t.equal(b.errno(new NotFoundError('gone'), 'getattr', '/a'), -E.ENOENT)
  t.equal(lines.length, 0, 'ENOENT is a normal answer: not logged')
  t.equal(b.errno(new NotFoundError('blob gone'), 'read', '/a'), -E.EIO, 'content missing from the store is an I/O error')
  t.match(lines.at(-1), /missing from store s3:\/\/bucket\/x: blob gone/)
  t.equal(b.errno(new CorruptObjectError('chunk sha256:ab mismatch'), 'read', '/f', 'chunks sha256:ab'), -E.EIO)
  t.equal(b.counters.corruptChunks, 1)
  t.match(lines.at(-1), /EIO: read "\/f" on \/mnt\/img \(chunks sha256:ab\): corrupt/)
  t.equal(b.errno(new StoreUnavailableError('GET blobs/x: ECONNREFUSED'), 'read', '/f', 'chunks sha256:cd'), -E.EIO)
  t.match(lines.at(-1), /sha256:cd.*store s3:\/\/bucket\/x unavailable: GET blobs/)
  t.equal(b.errno(new UnsupportedError('no'), 'read', '/f'), -E.ENOTSUP)
  t.equal(b.errno(new BadInputError('odd'), 'read', '/f'), -E.EIO)
  t.equal(b.counters.ioErrors, 4)
})

t.test('ErrnoBoundary.errno() passes Node system errors through and turns anything else into EIO', async t => {
  const { b, lines } = boundary()
  t.equal(b.errno(Object.assign(new Error('denied'), { code: 'EACCES' }), 'open', '/x'), -E.EACCES)
  t.equal(b.errno(Object.assign(new Error('weird'), { code: 'ERR_SOMETHING' }), 'open', '/x'), -E.EIO)
  t.equal(b.errno(new TypeError('bug'), 'open', '/x'), -E.EIO)
  t.equal(b.errno('a string', 'open', '/x'), -E.EIO)
  t.equal(b.errno(null, 'open', '/x'), -E.EIO)
  t.match(lines.at(-3), /unexpected error: TypeError: bug/)
})

t.test('ErrnoBoundary.errno() names a cache failure as the cache\'s, access denied as itself, and logs a bug with its stacks', async t => {
  const { b, lines } = boundary()
  t.equal(b.errno(new CacheIoError('chunk cache /c cannot read: MDB_CORRUPTED'), 'read', '/f'), -E.EIO)
  t.match(lines.at(-1), /EIO: read "\/f" on \/mnt\/img: the node's chunk cache failed: chunk cache \/c cannot read/)
  t.notMatch(lines.at(-1), /store/)
  t.equal(b.errno(new UsageError('cannot getRange blobs/x in store s3://b: access denied (AccessDenied 403)'), 'read', '/f'), -E.EIO)
  t.match(lines.at(-1), /EIO: read "\/f" on \/mnt\/img: cannot getRange blobs\/x in store s3:\/\/b: access denied/)
  t.notMatch(lines.at(-1), /unavailable|unexpected/)
  const bug = new TypeError('cannot read properties of undefined')
  t.equal(b.errno(new InternalError('cannot fetch chunk x: cannot read properties of undefined', { cause: bug }), 'read', '/f'), -E.EIO)
  t.match(lines.at(-1), /unexpected error: InternalError: cannot fetch chunk x/)
  t.match(lines.at(-1), /caused by: TypeError: cannot read properties of undefined\n\s+at /, "the bug's own stack is logged")
  t.equal(b.counters.ioErrors, 3)
})

t.test('ErrnoBoundary.errno() rate-limits its log lines and survives a throwing logger', async t => {
  const { b, lines } = boundary()
  for (let i = 0; i < LOG_BURST_LINES * 3; i++) b.errno(new StoreUnavailableError('down'), 'read', `/f${i}`)
  t.equal(lines.length, LOG_BURST_LINES)
  t.equal(b.counters.ioErrors, LOG_BURST_LINES * 3, 'every error is still counted')
  const throwing = new ErrnoBoundary({ log: () => { throw new Error('log broke') }, storeName: 's', mountpoint: '/m' })
  t.equal(throwing.errno(new StoreUnavailableError('down'), 'read', '/f'), -E.EIO)
})
