import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BROKEN_LAYERS, GIB, gzipBomb, writeOciLayoutDigestMismatch, writeOciLayoutMissingLayer, zstdBomb } from '../../../fixtures/broken.js'
import { LayerdError } from '../../errors.js'
import type { ImageSource } from './image-source.js'
import { openImageSource } from './open-image-source.js'

async function drain (src: ImageSource): Promise<number> {
  let entries = 0
  for (const layer of src.layers) {
    for await (const { body } of layer.entries()) {
      entries++
      if (body !== undefined) for await (const _ of body) { /* read */ }
    }
  }
  return entries
}

t.test('openImageSource() rejects every named broken layer (fixtures/broken.ts) with a one-line error naming input, layer and its own reason', async t => {
  const dir = t.testdir({})
  for (const fixture of BROKEN_LAYERS) {
    const path = join(dir, `${fixture.name}.${fixture.compression}`)
    writeFileSync(path, fixture.build())
    const warnings: string[] = []
    const result = openImageSource(path, { warn: m => warnings.push(m) }).then(drain)
    if (fixture.expect === 'accept-relative') {
      t.ok(await result > 0, `${fixture.name}: accepted`)
      t.match(warnings, [/has an absolute name; stored as "etc"/, /has an absolute name; stored as "etc\/x"/], `${fixture.name}: with a warning`)
      continue
    }
    const err = await result.then(() => undefined, (e: unknown) => e)
    t.type(err, LayerdError, `${fixture.name}: ${fixture.description}`)
    const message = (err as Error).message
    t.match(message, new RegExp(`^tar ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}, layer 1 of 1 \\(`), `${fixture.name}: names the input and layer`)
    t.equal((err as LayerdError).code, fixture.reason?.code, `${fixture.name}: code ${fixture.reason?.code ?? '(no reason recorded)'}`)
    t.match(message.slice(message.indexOf('): ') + 3), fixture.reason?.message ?? /^$ no reason recorded/, `${fixture.name}: refused for its own reason`)
    t.notMatch(message, /\n/, `${fixture.name}: one line`)
    t.comment(`${fixture.name}: ${message.slice(message.indexOf('): ') + 3)}`)
  }
})

t.test('openImageSource() stops the gzip and zstd bombs of fixtures/broken.ts quickly', async t => {
  const dir = t.testdir({})
  for (const [kind, build] of [['gzip', gzipBomb], ['zstd', zstdBomb]] as const) {
    const path = join(dir, `bomb.${kind}`)
    writeFileSync(path, build(2 * GIB))
    const started = Date.now()
    await t.rejects(openImageSource(path).then(drain), { name: 'LimitExceededError', message: /layer 1 of 1 \(bomb\.(gzip|zstd)\): \d+ compressed bytes decompress to more than \d+ \(ratio above 200\)/ })
    const ms = Date.now() - started
    t.ok(ms < 10_000, `${kind} bomb stopped in ${ms} ms (a few seconds even on a loaded CI machine)`)
  }
})

t.test('openImageSource() rejects broken OCI layouts from fixtures/broken.ts', async t => {
  const dir = t.testdir({})
  const missing = await writeOciLayoutMissingLayer(join(dir, 'missing'))
  await t.rejects(openImageSource(join(dir, 'missing')), {
    name: 'BadInputError',
    message: new RegExp(`^OCI layout .*missing: manifest sha256:[0-9a-f]{64} names layer ${missing.missingDigest} which is not in blobs/$`)
  })
  const mismatch = await writeOciLayoutDigestMismatch(join(dir, 'mismatch'))
  const src = await openImageSource(join(dir, 'mismatch'))
  await t.rejects(drain(src), { name: 'BadInputError', message: new RegExp(`layer 1 of 2 \\(sha256:[0-9a-f]{12}\\): blob content has digest sha256:[0-9a-f]{64}, not ${mismatch.mismatchedDigest}`) })
})
