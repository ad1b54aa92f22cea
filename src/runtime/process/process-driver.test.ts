import t from 'tap'
import { ProcessTierDriver } from './process-driver.js'
import { tierSuite } from '../tier-driver.conformance.js'

await tierSuite(t, new ProcessTierDriver())
