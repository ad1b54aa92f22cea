/**
 * Issue 19, crash: layerd is SIGKILLed 10 times while 16 host readers verify
 * the python image's files through a plain mount and 4 process and
 * container sandboxes read theirs through the image's stack, dropping the
 * page cache as they go. The holder restarts layerd each time, the new
 * layerd takes every FUSE connection over, and no reader sees an error or
 * a wrong byte.
 */
import t from 'tap'
import { assertNothingNoticed, readThroughDisruptions } from '../../fixtures/takeover-workload.js'

const KILLS = 10
// Subtests' own test dirs have long names; layerd's socket path must stay under the 108-byte sun_path limit.
const dir = t.testdir()

t.test('SIGKILLing layerd 10 times mid-read: zero read errors, zero wrong bytes, a new daemon each time', async t => {
  const r = await readThroughDisruptions(t, dir, KILLS, 300, async (_round, node) => { await node.layerd.killDaemon(); return undefined })
  assertNothingNoticed(t, r, KILLS)
  const log = await import('node:fs/promises').then(fs => fs.readFile(`${r.node.home}/layerd.log`, 'utf8'))
  t.equal(log.match(/was killed by SIGKILL; (starting a new one|the warm standby layerd \d+ takes over)/g)?.length, KILLS, 'the holder restarted layerd after each kill')
  t.ok((log.match(/the warm standby layerd \d+ takes over/g)?.length ?? 0) >= 1, 'a warm standby took over after a kill')
  t.equal(log.match(/took over \d+ image\(s\) on (\d+) kept/g)?.length, KILLS, 'each new layerd took the kept connections over')
  await r.node.layerd.stopDaemon()
  t.same(await (await import('../host/mount-table.js')).mountsUnder(`${r.node.home}/mnt`), [], 'a clean stop unmounts')
})
