/**
 * When the holder restarts a layerd that ended: never after a code that says
 * restarting cannot help, at once after a healthy run or a handover, else
 * with a backoff (250 ms doubling to 30 s) that counts failed starts in a row.
 * Pure.
 *
 * May import: src/exit-codes.ts.
 */
import { LAYERD_EXIT } from '../exit-codes.js'

/** A layerd that served at least this long is restarted at once. */
export const HEALTHY_MS = 1_000
const BACKOFF_FIRST_MS = 250
const BACKOFF_MAX_MS = 30_000

/** layerd exit codes after which restarting cannot help (clean stop, bad flags, another daemon holds the home). */
const FINAL_EXITS = new Set<number>([LAYERD_EXIT.OK, LAYERD_EXIT.USAGE, LAYERD_EXIT.ALREADY_RUNNING])

/** Whether a layerd that exited with `code` is to stay down (the holder stops, with that code). */
export function isFinalExit (code: number | null): boolean {
  return code !== null && FINAL_EXITS.has(code)
}

/** The wait before the next start after `failures` failed starts in a row (0: at once). */
export function restartDelayMs (failures: number): number {
  return failures === 0 ? 0 : Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** (failures - 1))
}
