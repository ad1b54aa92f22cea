/**
 * layerctl: the command line. A thin composition root; everything lives in src/cli. `npm run build` bundles this
 * module with what it imports into dist/cli/layerctl.bundle.cjs, which dist/cli/layerctl.js runs (cli/layerctl.ts).
 */
import { closeEarly, connectEarly } from '../src/cli/early-connect.js'

const argv = process.argv.slice(2)
// `mount` on a cold node: layerd starts while the rest of layerctl loads (src/cli/early-connect.ts).
connectEarly(argv)
// No top-level await: the bundle is CommonJS (build/layerd-bundle.ts).
import('../src/cli/main.js').then(async ({ main }) => {
  process.exitCode = await main(argv)
  await closeEarly()
}, (err: unknown) => {
  console.error(`layerctl: fatal: ${(err as Error)?.stack ?? String(err)}`)
  process.exitCode = 1
})
