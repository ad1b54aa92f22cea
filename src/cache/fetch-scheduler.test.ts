import t from 'tap'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { FetchScheduler, type FetchJob } from './fetch-scheduler.js'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

t.test('FetchScheduler keeps no reference to a job once it has run (its fetched chunks can be collected)', async t => {
  const scheduler = new FetchScheduler({ demand: 2, prefetch: 1 })
  const refs: Array<WeakRef<object>> = []
  /** A job holding 64 KiB, as a fetch job holds its chunks; only a WeakRef to it stays here. */
  const submit = (i: number): void => {
    const payload = { chunk: Buffer.alloc(64 * 1024, i) }
    refs.push(new WeakRef(payload))
    const job: FetchJob & { payload: object } = { priority: i % 2 === 0 ? 'demand' : 'prefetch', state: 'queued', payload, run: async () => {} }
    scheduler.submit(job)
  }
  for (let i = 0; i < 20; i++) submit(i)
  await scheduler.idle()
  await new Promise(resolve => setTimeout(resolve, 10))
  gc()
  t.equal(refs.filter(r => r.deref() !== undefined).length, 0, 'every finished job collected')
  t.equal(scheduler.queued('demand') + scheduler.queued('prefetch'), 0)
})

t.test('FetchScheduler runs demand before prefetch within its limits and promotes a queued prefetch', async t => {
  const scheduler = new FetchScheduler({ demand: 1, prefetch: 1 })
  const order: string[] = []
  const job = (name: string, priority: 'demand' | 'prefetch'): FetchJob =>
    ({ priority, state: 'queued', run: async () => { order.push(name); await new Promise(resolve => setTimeout(resolve, 5)) } })
  scheduler.submit(job('d1', 'demand'))
  scheduler.submit(job('d2', 'demand'))
  const p1 = job('p1', 'prefetch')
  const p2 = job('p2', 'prefetch')
  scheduler.submit(p1)
  scheduler.submit(p2)
  t.equal(scheduler.queued('prefetch'), 2, 'prefetch waits while a demand job is queued')
  t.equal(scheduler.promote(p2), true)
  await scheduler.idle()
  t.same(order, ['d1', 'd2', 'p2', 'p1'], 'demand first; the promoted prefetch joins the demand queue')
})
