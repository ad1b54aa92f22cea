/**
 * PreparedTakeovers on a real store (the python image pushed to a file://
 * store): a record's tree and table are built from its TreeSource and handed
 * only to the mount of that mountpoint and those layers, and only while that
 * mountpoint is mounted; a record whose
 * digest is not the table this code builds, or whose TOCs cannot be read, is
 * logged and left to the usual path, never thrown.
 */
import t from 'tap'
import { join } from 'node:path'
import { copyPushedStore, ATTACK_IMAGE } from '../../attacks/attack-harness.js'
import { openStore } from '../../store/open-store.js'
import { loadImage } from '../../image/load-image.js'
import { mergeLayers } from '../../format/merge.js'
import { splitTopLayer } from '../../format/layer-split.js'
import { ImageView } from '../../fs/image-view.js'
import { encodeKernelFuseTable } from '../../fs/kernel-fuse-table.js'
import { tableDigest } from '../../fs/kernel-fuse.js'
import type { ConnectionRecord } from '../../fs/kernel-fuse-keeper.js'
import type { MergedTree } from '../../format/merge.js'
import { PreparedTakeovers } from './prepared-takeovers.js'

const dir = t.testdir()
const storeUrl = `file://${join(dir, 'store')}`

function record (mountpoint: string, tree: MergedTree, source: ConnectionRecord['source']): ConnectionRecord {
  return {
    mountpoint,
    tableDigest: tableDigest(encodeKernelFuseTable(new ImageView(tree)).bytes),
    init: { kernelMajor: 7, kernelMinor: 40, kernelFlags: 0, kernelFlags2: 0, replyFlags: 0 },
    options: { entryValidS: 1, attrValidS: 1, negativeValidS: 1, maxPages: 256, maxReadahead: 0 },
    ...(source === undefined ? {} : { source })
  }
}

t.before(async () => { await copyPushedStore(join(dir, 'store')) })

t.test('PreparedTakeovers.prepare builds merged and stack-top trees from the store, handed out once to the same mountpoint and layers', async t => {
  const store = openStore(storeUrl)
  t.teardown(() => store.close())
  const image = await loadImage(store, ATTACK_IMAGE)
  const layers = image.manifest.layers.map(l => l.digest)
  t.ok(layers.length >= 2, `the image has ${layers.length} layers`)
  const merged = mergeLayers(image.tocs)
  const base = mergeLayers(image.tocs.slice(0, -1))
  const split = splitTopLayer(base, image.tocs.at(-1)!)
  if ('reason' in split) { t.fail(`the fixture's top layer cannot be split: ${split.reason}`); return }
  const logged: string[] = []
  const prepared = await PreparedTakeovers.prepare([
    record('/m/plain', merged, { store: storeUrl, layers }),
    record('/m/top', split.tree, { store: storeUrl, layers: layers.slice(-1), base: layers.slice(0, -1) }),
    record('/m/old', merged, undefined)
  ], loc => openStore(loc.store), line => logged.push(line))
  t.equal(prepared.count, 2, 'the two records with a source are prepared; the one without is left alone')
  t.same(logged, [], 'nothing logged')
  t.equal(prepared.take('/m/plain', layers.slice(1)), undefined, 'other layers do not get the plain tree')
  t.equal(prepared.take('/m/top', layers.slice(-1)), undefined, 'a top without its base does not get the split tree')
  const plain = prepared.take('/m/plain', layers)
  t.ok(plain !== undefined, 'the plain mount gets its tree')
  t.equal(plain?.digest, tableDigest(encodeKernelFuseTable(new ImageView(merged)).bytes), '… whose table is the one it was served from')
  t.equal(plain?.view.tree, plain?.tree, '… with the view of that tree')
  t.equal(prepared.take('/m/plain', layers), undefined, '… once')
  const top = prepared.take('/m/top', layers.slice(-1), layers.slice(0, -1))
  t.equal(top?.digest, tableDigest(encodeKernelFuseTable(new ImageView(split.tree)).bytes), 'the stack top gets its split tree and table')
  t.ok(prepared.toc(layers[0]!) !== undefined, 'the decoded TOCs are kept for the takeover')
  t.equal(prepared.taken, 2, 'two were taken')
  prepared.clear()
  t.equal(prepared.toc(layers[0]!), undefined, 'clear() drops them')
})

t.test('PreparedTakeovers.prepare skips records whose mountpoint is not mounted (after a reboot)', async t => {
  const store = openStore(storeUrl)
  t.teardown(() => store.close())
  const image = await loadImage(store, ATTACK_IMAGE)
  const layers = image.manifest.layers.map(l => l.digest)
  const merged = mergeLayers(image.tocs)
  const logged: string[] = []
  const asked: string[] = []
  const prepared = await PreparedTakeovers.prepare([
    record('/m/gone', merged, { store: storeUrl, layers }),
    record('/m/here', merged, { store: storeUrl, layers })
  ], loc => openStore(loc.store), line => logged.push(line), async mp => { asked.push(mp); return mp === '/m/here' })
  t.same(asked, ['/m/gone', '/m/here'], 'each mountpoint is looked up')
  t.equal(prepared.count, 1, 'only the mounted one is prepared')
  t.equal(prepared.take('/m/gone', layers), undefined, 'nothing for the one not mounted')
  t.ok(prepared.take('/m/here', layers) !== undefined, 'the mounted one is there')
  t.same(logged, [], 'nothing logged')
})

t.test('PreparedTakeovers.prepare logs and skips a record whose table differs or whose TOCs cannot be read', async t => {
  const store = openStore(storeUrl)
  t.teardown(() => store.close())
  const image = await loadImage(store, ATTACK_IMAGE)
  const layers = image.manifest.layers.map(l => l.digest)
  const wrongTree = mergeLayers(image.tocs.slice(0, -1)) // a different tree: its digest is not the merge of every layer's
  const logged: string[] = []
  const prepared = await PreparedTakeovers.prepare([
    // First: TOCs are content-addressed, so one read from another store for a later record would serve this one too.
    record('/m/bad-store', wrongTree, { store: `file://${join(dir, 'no-such-store')}`, layers }),
    record('/m/differs', wrongTree, { store: storeUrl, layers }),
    record('/m/missing', wrongTree, { store: storeUrl, layers: [`sha256:${'0'.repeat(64)}`] })
  ], loc => openStore(loc.store, { retry: false }), line => logged.push(line))
  t.equal(prepared.count, 0, 'none prepared')
  t.equal(logged.length, 3, `one line each: ${logged.join(' | ')}`)
  t.match(logged[0], /preparing the takeover of \/m\/bad-store: .*not found in store file:\/\/.*no-such-store/, 'the unreadable store, named')
  t.match(logged[1], /preparing the takeover of \/m\/differs: this daemon builds another table .*; it is built at the takeover/, 'the other table, with both digests')
  t.match(logged[2], /preparing the takeover of \/m\/missing: .*0000000000/, 'the missing TOC, named')
  t.equal(prepared.take('/m/differs', layers), undefined, 'nothing to take')
})
