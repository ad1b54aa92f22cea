#!/usr/bin/env node
/** layerctl: the command line. A thin composition root; everything lives in src/cli. */
import { main } from '../src/cli/main.js'

process.exitCode = await main(process.argv.slice(2))
