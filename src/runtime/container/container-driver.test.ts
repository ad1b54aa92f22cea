import t from 'tap'
import { ContainerTierDriver } from './container-driver.js'
import { tierSuite } from '../tier-driver.conformance.js'

await tierSuite(t, new ContainerTierDriver({ runtime: 'runc' }))
t.test('ContainerTierDriver with crun', async t => {
  await tierSuite(t, new ContainerTierDriver({ runtime: 'crun' }), { short: true })
})
