/**
 * What signing an S3 range GET costs (issue 15's per-request cost; the code
 * review's "a hand-written signer where a kept library exists"): our
 * `SigV4Signer` (src/store/sigv4.ts, what S3HttpReader signs with) against
 * the AWS SDK's own signer, `@smithy/signature-v4`, used directly without
 * the S3 client. Both sign the same requests, which sigv4.test shows they
 * sign alike.
 *
 * - per request: µs per `sign()` of a range GET, in batches of --requests,
 *   the two taking turns in one process (--rounds rounds, medians);
 * - first use: ms to import each signer in a fresh Node process (--imports
 *   processes each, taking turns, medians): what the first GET of a cold
 *   daemon pays.
 *
 *   node dist/bench/sigv4-cost.js [--requests N] [--rounds R] [--imports K] [--out DIR]
 *
 * Bench-only: may import anything.
 */
import { execFileSync } from 'node:child_process'
import { performance } from 'node:perf_hooks'
import { SignatureV4 } from '@smithy/signature-v4'
import { SigV4Signer } from '../src/store/sigv4.js'
import { NodeSha256 } from '../fixtures/node-sha256.js'
import { fmt, markdownTable, median, REPORT_OPTIONS, startLoadSampler, writeReport } from './bench-report.js'
import { benchArgs, type BenchOptions } from './bench-args.js'

const SPEC: BenchOptions = {
  requests: { type: 'string', default: '20000', value: 'N' },
  rounds: { type: 'string', default: '7', value: 'R' },
  imports: { type: 'string', default: '7', value: 'K' },
  ...REPORT_OPTIONS
}
const ARGS = benchArgs('sigv4-cost', SPEC)
const CREDENTIALS = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' }
const HOST = '127.0.0.1:9000'

function rangeOf (i: number): string { return `bytes=${i * 262144}-${i * 262144 + 262143}` }

function oursPerRequestUs (n: number): number {
  const signer = new SigV4Signer(CREDENTIALS, 'us-east-1')
  const started = performance.now()
  for (let i = 0; i < n; i++) signer.sign({ method: 'GET', path: `/bucket/store/blobs/sha256/b${i}`, headers: { host: HOST, range: rangeOf(i) } })
  return (performance.now() - started) * 1000 / n
}

async function sdkPerRequestUs (n: number): Promise<number> {
  const signer = new SignatureV4({ credentials: CREDENTIALS, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false, applyChecksum: false })
  const started = performance.now()
  for (let i = 0; i < n; i++) {
    await signer.sign({
      method: 'GET', protocol: 'http:', hostname: '127.0.0.1', port: 9000, path: `/bucket/store/blobs/sha256/b${i}`, query: {},
      headers: { host: HOST, range: rangeOf(i), 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' }
    })
  }
  return (performance.now() - started) * 1000 / n
}

/** ms to import `specifier` in a fresh Node process (measured inside it, so Node's own boot is not counted). */
function importMs (specifier: string): number {
  const script = `const t = performance.now(); await import(${JSON.stringify(specifier)}); process.stdout.write(String(performance.now() - t))`
  return Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }))
}

async function main (): Promise<void> {
  const requests = ARGS.number('requests', { min: 1 })
  const rounds = ARGS.number('rounds', { min: 1 })
  const imports = ARGS.number('imports', { min: 1 })
  const load = startLoadSampler()
  const ours: number[] = []
  const sdk: number[] = []
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) { ours.push(oursPerRequestUs(requests)); sdk.push(await sdkPerRequestUs(requests)) } else { sdk.push(await sdkPerRequestUs(requests)); ours.push(oursPerRequestUs(requests)) }
  }
  const oursModule = new URL('../src/store/sigv4.js', import.meta.url).href
  const oursImport: number[] = []
  const sdkImport: number[] = []
  for (let k = 0; k < imports; k++) { oursImport.push(importMs(oursModule)); sdkImport.push(importMs('@smithy/signature-v4')) }
  const rows = [
    ['ours (src/store/sigv4.ts)', fmt(median(ours), 1), fmt(median(oursImport), 1)],
    ['@smithy/signature-v4', fmt(median(sdk), 1), fmt(median(sdkImport), 1)]
  ]
  const markdown = [
    `Range GETs signed: ${rounds} rounds of ${requests} per signer, taking turns in one process; imports: ${imports} fresh processes per signer.`,
    '',
    markdownTable(['signer', 'µs per request (median)', 'ms to import, fresh process (median)'], rows),
    '',
    `- Per request the SDK's signer costs ${fmt(median(sdk) / median(ours), 2)}x ours; its first use costs ${fmt(median(sdkImport) - median(oursImport), 1)} ms more.`
  ].join('\n')
  await writeReport({
    name: 'sigv4-cost',
    title: 'Signing an S3 range GET: our SigV4 signer against @smithy/signature-v4',
    command: `node dist/bench/sigv4-cost.js --requests ${requests} --rounds ${rounds} --imports ${imports}`,
    load: load.stop(),
    markdown,
    data: { requests, rounds, imports, oursUs: ours, sdkUs: sdk, oursImportMs: oursImport, sdkImportMs: sdkImport }
  }, ARGS.string('out'))
}

await main()
