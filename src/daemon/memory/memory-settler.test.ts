/**
 * Issue 14: the memory a burst takes goes back to the system when the burst
 * ends. A real layerd exports the real python image (every chunk read from
 * the lmdb map, decoded, written as a tar: a burst of buffers and mapped pages), and
 * its RSS once it settled must be within 10% of what it was before. The
 * burst must really have taken memory (VmHWM well above the start), or the
 * test would prove nothing.
 */
import t from 'tap'
import { join } from 'node:path'
import { stat, writeFile } from 'node:fs/promises'
import { ensureDebianImages } from '../../../fixtures/debian-images.js'
import { layerdNode, type LayerdNode } from '../../../fixtures/layerd-harness.js'
import type { DaemonMemory } from './memory-report.js'
import type { SettleStats } from './memory-settler.js'
import { connectDaemon } from '../client/daemon-launcher.js'
import { pushInto } from '../../../fixtures/store-steps.js'

const MB = 1e6
const images = await ensureDebianImages()
const python = images.images['python-v1']
const work = t.testdir()
const storeUrl = `file://${join(work, 'store')}`
await pushInto(storeUrl, python.dockerArchive, 'deb/python:v1')

type Memory = DaemonMemory & { settle: SettleStats }

async function memory (node: LayerdNode): Promise<Memory> {
  const r = await node.layerctl('stats', '--json')
  if (r.code !== 0) throw new Error(`layerctl stats: ${r.stderr}`)
  return (JSON.parse(r.stdout) as { memory: Memory }).memory
}

/** The daemon's memory after its first settle that began after `since` (the settler runs one after every export). */
async function settledAfter (node: LayerdNode, since: number): Promise<Memory> {
  const deadline = Date.now() + 30_000
  for (;;) {
    const m = await memory(node)
    const at = m.settle.lastSettleAt === undefined ? 0 : Date.parse(m.settle.lastSettleAt) - (m.settle.lastSettleMs ?? 0)
    if (at >= since) return m
    if (Date.now() > deadline) throw new Error(`layerd did not settle within 30 s: ${JSON.stringify(m.settle)}`)
    await new Promise(resolve => setTimeout(resolve, 250))
  }
}

t.test('RSS after an export returns to within 10% of before', async t => {
  const node = layerdNode(join(work, 'node'), { store: storeUrl })
  t.teardown(async () => { await node.stopDaemon() })
  await node.startDaemon()
  // A first, small burst loads the export code, so that "before" is a daemon that has exported once.
  const warm = await node.layerctl('export', 'deb/python:v1', '-o', join(work, 'warm.tar'))
  t.equal(warm.code, 0, warm.stderr)
  const before = await settledAfter(node, Date.now())
  // Reset VmHWM (proc(5), clear_refs: 5), so the high-water mark is this export's.
  await writeFile(`/proc/${(await node.daemonPid())!}/clear_refs`, '5')
  const out = join(work, 'python.tar')
  const r = await node.layerctl('export', 'deb/python:v1', '-o', out)
  t.equal(r.code, 0, r.stderr)
  const exported = Date.now()
  t.ok((await stat(out)).size > 100 * MB, 'the export wrote the whole image')
  let after = await settledAfter(node, exported)
  // Freed memory reaches the system a little after the settle (V8 frees ArrayBuffers on a background thread, and
  // malloc_trim must follow them): on a loaded machine the first settle can run before those frees. Ask for
  // further settles, the same release the daemon runs when it goes quiet, for up to 15 s before judging.
  for (const deadline = Date.now() + 15_000; after.rssBytes > before.rssBytes * 1.1 && Date.now() < deadline;) {
    await new Promise(resolve => setTimeout(resolve, 1000))
    const client = await connectDaemon({ home: node.home, autoStart: false })
    try { await client.call('memory', { settle: true }) } finally { client.close() }
    after = { ...(await memory(node)), peakRssBytes: after.peakRssBytes }
  }
  t.comment(`RSS before ${(before.rssBytes / MB).toFixed(1)} MB, high-water ${(after.peakRssBytes / MB).toFixed(1)} MB, after ${(after.rssBytes / MB).toFixed(1)} MB`)
  t.ok(after.peakRssBytes > before.rssBytes + 20 * MB, 'the burst took memory (VmHWM at least 20 MB above the start)')
  t.ok(after.rssBytes <= before.rssBytes * 1.1, `RSS after the export (${(after.rssBytes / MB).toFixed(1)} MB) is within 10% of before (${(before.rssBytes / MB).toFixed(1)} MB)`)
})
