/**
 * FastCDC's cut search in C (native/fastcdc.c) as a CdcScanner, for push's
 * chunking workers: in JS the scan was 7.5% of a directory push's wall time
 * (bench/push-throughput.ts). It cuts exactly where JsCdcScanner does
 * (native-cdc-scanner.test.ts). Without the addon, the JS scanner.
 *
 * May import: src/errors.ts, src/format/, src/native.ts.
 */
import { UnsupportedError } from '../errors.js'
import { GEAR_TABLE, JsCdcScanner, type CdcScanner } from '../format/chunker.js'
import { nativeFastCdcNext } from '../native.js'

/** The native scanner, or undefined when the addon is not built. Sync. */
export function nativeCdcScanner (): CdcScanner | undefined {
  let next: ReturnType<typeof nativeFastCdcNext>
  try { next = nativeFastCdcNext() } catch (err) {
    if (err instanceof UnsupportedError) return undefined
    throw err
  }
  return { next: (data, from, state, params) => next(data, from, state, params, GEAR_TABLE) }
}

/** The fastest scanner here: native when built, else JS. Sync. */
export function bestCdcScanner (): CdcScanner {
  return nativeCdcScanner() ?? new JsCdcScanner()
}
