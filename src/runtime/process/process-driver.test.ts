import t from 'tap'
import { ProcessTierDriver } from './process-driver.js'
import { tierSuite } from './tier-suite.js'

await tierSuite(t, new ProcessTierDriver())
