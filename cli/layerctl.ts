#!/usr/bin/env node
/** layerctl: the command line. A thin composition root; everything lives in src/cli. */
import { closeEarly, connectEarly } from '../src/cli/early-connect.js'

const argv = process.argv.slice(2)
// `mount` on a cold node: layerd starts while the rest of layerctl loads (src/cli/early-connect.ts).
connectEarly(argv)
const { main } = await import('../src/cli/main.js')
process.exitCode = await main(argv)
await closeEarly()
