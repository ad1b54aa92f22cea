import t from 'tap'
import type { Digest } from '../../format/digest.js'
import type { LayerToc } from '../../format/toc.js'
import { SharedTocs } from './shared-tocs.js'

const layer = (c: string): Digest => `sha256:${c.repeat(64)}` as Digest
const toc = (): LayerToc => ({ diffId: `sha256:${'0'.repeat(64)}`, blobs: [], chunks: [], entries: [{ path: '', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 0, size: 0 }] })

t.test('SharedTocs.acquire() hands every mount of a layer the first decoded TOC, release() drops it with the last user', async t => {
  const shared = new SharedTocs()
  const [base, a, b] = [layer('a'), layer('b'), layer('c')]
  const first = [toc(), toc()]
  const one = shared.acquire([base, a], first)
  t.equal(one[0], first[0])
  t.equal(shared.peek(base), first[0], 'peek finds a held TOC')
  const second = [toc(), toc()]
  const two = shared.acquire([base, b], second)
  t.equal(two[0], first[0], 'the base layer: the instance already held')
  t.equal(two[1], second[1], 'a new layer: its own decoded TOC')
  t.equal(shared.size, 3)
  shared.release([base, a])
  t.equal(shared.peek(a), undefined, 'a layer nobody uses is dropped')
  t.equal(shared.peek(base), first[0], 'still used by the second mount')
  shared.release([base, b])
  t.equal(shared.size, 0)
  shared.release([base])
  t.equal(shared.size, 0, 'releasing an unknown layer is harmless')
})

t.test('SharedTocs counts one reference per acquire, even for one image mounted twice', async t => {
  const shared = new SharedTocs()
  const l = layer('d')
  const x = toc()
  shared.acquire([l], [x])
  shared.acquire([l], [toc()])
  shared.release([l])
  t.equal(shared.peek(l), x, 'one user left')
  shared.release([l])
  t.equal(shared.peek(l), undefined)
})
