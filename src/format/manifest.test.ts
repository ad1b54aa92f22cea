import t from 'tap'
import { createHash } from 'node:crypto'
import { CorruptObjectError } from '../errors.js'
import { MANIFEST_MEDIA_TYPE, decodeManifest, decodeRefRecord, encodeJson, type ImageManifest, type RefRecord } from './manifest.js'

const d = (c: string): `sha256:${string}` => `sha256:${c.repeat(64)}`
const MANIFEST: ImageManifest = {
  mediaType: MANIFEST_MEDIA_TYPE,
  layers: [{ digest: d('a'), diffId: d('b'), size: 100, storedBytes: 60, entries: 3 }],
  config: { architecture: 'amd64', os: 'linux', config: { Env: ['PATH=/bin'], Cmd: ['sh'], 'X-Unknown': { kept: true } }, rootfs: { type: 'layers', diff_ids: [d('b')] }, unknownTopLevel: 1 },
  base: { ref: 'deb/base:v1', manifest: d('c'), layers: 1 }
}

t.test('encodeJson() of a manifest is pinned, and decodeManifest() keeps the OCI config verbatim', async t => {
  const bytes = encodeJson(MANIFEST)
  t.equal(MANIFEST_MEDIA_TYPE, 'application/vnd.layerd.manifest.v1+json')
  t.equal(createHash('sha256').update(bytes).digest('hex'), '5a2c4f54d9005b22dff5c9aff88221adcb405a8f279f238d52623078649e83b4')
  t.same(decodeManifest(bytes, 'manifests/x'), MANIFEST, 'unknown config fields survive a round trip')
})

t.test('decodeManifest() refuses malformed manifests, naming the object', async t => {
  const bad = (m: unknown): Uint8Array => encodeJson(m)
  const cases: Array<[string, Uint8Array, RegExp]> = [
    ['not JSON', new TextEncoder().encode('['), /manifest manifests\/x is not valid JSON/],
    ['another media type', bad({ ...MANIFEST, mediaType: 'application/json' }), /unknown mediaType "application\/json"/],
    ['a layer without digest', bad({ ...MANIFEST, layers: [{ ...MANIFEST.layers[0], digest: 'x' }] }), /^manifest manifests\/x is invalid: layer 0 is malformed$/],
    ['a negative size', bad({ ...MANIFEST, layers: [{ ...MANIFEST.layers[0], size: -1 }] }), /layer 0 is malformed/],
    ['a config array', bad({ ...MANIFEST, config: [] }), /config is not an object/],
    ['a bad base', bad({ ...MANIFEST, base: { ref: 'x', manifest: 'nope', layers: 1 } }), /base is malformed/],
    ['a bad block view', bad({ ...MANIFEST, blockView: 'x' }), /blockView is not a digest/]
  ]
  for (const [what, bytes, message] of cases) t.throws(() => decodeManifest(bytes, 'manifests/x'), { constructor: CorruptObjectError, message }, what)
})

t.test('decodeRefRecord() reads a ref and refuses one without history', async t => {
  const r: RefRecord = { name: 'deb/python', tag: 'v1', history: [{ manifest: d('a'), at: '2026-01-01T00:00:00.000Z' }] }
  t.same(decodeRefRecord(encodeJson(r), 'refs/x'), r)
  t.throws(() => decodeRefRecord(encodeJson({ ...r, history: [] }), 'refs/x'), { constructor: CorruptObjectError, message: 'ref refs/x is invalid' })
  t.throws(() => decodeRefRecord(encodeJson({ ...r, history: [{ manifest: 'x', at: 'now' }] }), 'refs/x'), CorruptObjectError)
})
