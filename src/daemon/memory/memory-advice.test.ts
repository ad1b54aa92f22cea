/**
 * The addon's memory calls (native/memory.c) on real memory: malloc's
 * counters and trim, and madvise on the lmdb map of a real LmdbChunkCache,
 * which must lose nothing (every chunk reads back, byte for byte, after its
 * pages were unmapped or paged out).
 */
import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { execFile } from 'node:child_process'
import { closeSync, openSync, writeFileSync } from 'node:fs'
import { promisify } from 'node:util'
import { join } from 'node:path'
import { LmdbChunkCache } from '../../cache/lmdb-chunk-cache.js'
import { nativeMemory } from '../../native.js'

const native = nativeMemory()
const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

t.test('mallocStats() counts an allocation, mallocTrim() answers', async t => {
  const s = native.mallocStats()
  for (const k of ['arenaBytes', 'mmapBytes', 'inUseBytes', 'freeBytes', 'topReleasableBytes'] as const) t.ok(Number.isFinite(s[k]) && s[k] >= 0, k)
  t.ok(s.arenaBytes + s.mmapBytes >= s.inUseBytes, 'in use fits in what malloc holds')
  t.equal(typeof native.mallocTrim(), 'boolean')
  t.equal(native.mallocArenaMax(2), true)
  t.equal(native.mallocMmapThreshold(1024 * 1024), true)
  t.throws(() => native.mallocMmapThreshold(-1), { code: 'ERR_INVALID_ARG_TYPE' }, 'a negative threshold is refused')
})

t.test('adviseMappedFile() unmaps and pages out the lmdb map without losing a byte', async t => {
  const dir = t.testdir()
  const cache = LmdbChunkCache.open(join(dir, 'cache'), { writeDelayMs: 1 })
  t.teardown(async () => { await cache.close() })
  const chunks = Array.from({ length: 64 }, () => randomBytes(64 * 1024))
  for (const c of chunks) await cache.put(sha(c), c)
  await new Promise(resolve => setTimeout(resolve, 100)) // the batch commits
  const readAll = (): boolean => chunks.every(c => cache.get(sha(c))?.equals(c) === true)
  t.ok(readAll(), 'every chunk reads back from the map')
  for (const advice of ['unmap', 'cold', 'pageout'] as const) {
    const advised = native.adviseMappedFile(cache.mapFile, advice)
    t.ok(advised >= 4 * 1024 * 1024, `${advice}: the map was advised (${advised} bytes)`)
    t.ok(readAll(), `${advice}: every chunk still reads back, byte for byte`)
  }
  t.equal(native.adviseMappedFile(join(dir, 'not-mapped'), 'unmap'), 0, 'a file this process does not map: nothing advised')
})

t.test('adviseMappedFile() never touches a writable or private mapping, and refuses bad arguments', async t => {
  t.equal(native.adviseMappedFile('[heap]', 'unmap'), 0, 'the malloc heap (private, writable) is left alone')
  t.throws(() => native.adviseMappedFile('', 'unmap'), TypeError)
  t.throws(() => native.adviseMappedFile('/x', 'free' as 'unmap'), TypeError)
})

t.test('fadviseDontNeed() accepts an open file and names the syscall on a bad descriptor', async t => {
  const f = join(t.testdir(), 'f')
  writeFileSync(f, randomBytes(1 << 20))
  const fd = openSync(f, 'r')
  t.doesNotThrow(() => native.fadviseDontNeed(fd, 0, 0))
  closeSync(fd)
  t.throws(() => native.fadviseDontNeed(fd, 0, 0), { code: 'EBADF', syscall: 'posix_fadvise(POSIX_FADV_DONTNEED)' })
})

t.test('unmapCleanFilePages() gives back the node binary\'s mapped pages and the process runs on, computing the same bytes', async t => {
  // In a child: a mistake here (a private copy dropped) would crash or corrupt the process that calls it.
  const script = `
    import { createHash } from 'node:crypto'
    import { readFileSync } from 'node:fs'
    import { gzipSync, gunzipSync } from 'node:zlib'
    const { nativeMemory } = await import(${JSON.stringify(new URL('../../native.js', import.meta.url).href)})
    const rssFile = () => Number(/^RssFile:\\s+(\\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'))[1]) * 1024
    // Text (zlib, sha256, regexps), read-only data (ICU's tables) and the libraries' GOT all used after each unmap.
    const work = () => createHash('sha256').update(gunzipSync(gzipSync(Buffer.alloc(1 << 20, 'layerd ')))).update(new Intl.NumberFormat('de-DE').format(1234567.891)).update(JSON.stringify([/a+b/.exec('xaab')])).digest('hex')
    const first = work()
    const before = rssFile()
    const advised = nativeMemory().unmapCleanFilePages()
    const after = rssFile()
    const digests = [work()]
    for (let i = 0; i < 5; i++) { nativeMemory().unmapCleanFilePages(); digests.push(work()) }
    console.log(JSON.stringify({ first, digests, before, after, advised }))
  `
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })
  const r = JSON.parse(stdout) as { first: string, digests: string[], before: number, after: number, advised: number }
  t.ok(r.advised > 16 * 1024 * 1024, `the node binary's text and read-only data were advised (${r.advised} bytes)`)
  t.ok(r.after < r.before - 8 * 1024 * 1024, `file-backed RSS fell (${r.before} → ${r.after} bytes)`)
  t.strictSame(r.digests, Array(6).fill(r.first), 'every round after an unmap computes the same digest')
})
