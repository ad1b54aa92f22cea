/**
 * The wire protocol between layerd and its holder (holder.ts): one
 * SOCK_SEQPACKET socketpair, inherited by layerd as fd LAYERD_HOLDER_FD.
 * layerd asks, the holder answers; each message is one JSON object, with
 * the fds it carries attached (SCM_RIGHTS).
 *
 *   → { op: 'put', name } + [fd]   keep this fd under `name` (replacing one kept there)   ← { op: 'ok' }
 *   → { op: 'drop', name }          close the fd kept under `name`                          ← { op: 'ok' }
 *   → { op: 'list' }                every kept fd: one { op: 'fd', name } + [fd] each,      ← … { op: 'end', count }
 *   → { op: 'standby' }             layerd has loaded and waits for the home's lock        ← { op: 'ok' }
 *                                   (a warm standby: answered only when it is to take over)
 *                                   (a planned restart then tells the old layerd to hand over)
 *   → { op: 'ready' }               layerd serves (resets the holder's restart backoff)    ← { op: 'ok' }
 *   → { op: 'exiting', code }       layerd exits with `code` (no answer): sent only by a
 *                                   layerd that is not the holder's child (a rescue holder's,
 *                                   rescue-holder.ts), whose exit code the holder cannot reap
 *   any failure                                                                            ← { op: 'error', message }
 *
 * Names are what systemd's FDNAME allows: [A-Za-z0-9_.-], 1 to 64 bytes.
 *
 * May import: nothing.
 */

export const HOLDER_FD_ENV = 'LAYERD_HOLDER_FD'
/**
 * Set (to '1') for a warm standby: a layerd the holder keeps loaded while
 * another serves. Its `standby` is answered only when it is to take over
 * (the serving one died, or hands over); until then it holds nothing (no
 * lock, no fd, no file), and it exits when the holder's socket closes.
 */
export const HOLDER_STANDBY_ENV = 'LAYERD_HOLDER_STANDBY'
/**
 * Set (to the holder's own nice value) for a layerd the holder started niced
 * because it only prepares while another serves (a warm standby, a planned
 * restart's new one): it goes back to this value, on every thread, when it
 * takes over (src/host/thread-priority.ts).
 */
export const HOLDER_SERVE_NICE_ENV = 'LAYERD_SERVE_NICE'
/**
 * Set (to '1') by the holder's C front (native/holder_front.c) for the layerd
 * it starts before the Node holder has booted: that holder keeps no fd yet
 * and runs no other layerd, so the answers to `list` (none) and `standby`
 * (ok) are known, and layerd does not wait for a holder still booting
 * beside it. The holder reads the requests it does send (put, ready) once up.
 */
export const HOLDER_FRESH_ENV = 'LAYERD_HOLDER_FRESH'
export const HOLDER_PID_FILE = 'holder.pid'
export const HOLDER_SOCKET = 'holder.sock'
/** Largest message either side sends. */
export const MAX_MESSAGE_BYTES = 64 * 1024

export type HolderRequest =
  | { op: 'put', name: string }
  | { op: 'drop', name: string }
  | { op: 'list' }
  | { op: 'standby' }
  | { op: 'ready' }
  | { op: 'exiting', code: number }

export type HolderReply =
  | { op: 'ok' }
  | { op: 'fd', name: string }
  | { op: 'end', count: number }
  | { op: 'error', message: string }

const NAME = /^[A-Za-z0-9_.-]{1,64}$/

/** Whether `name` can name a kept fd (here and in systemd's fd store). */
export function validFdName (name: unknown): name is string {
  return typeof name === 'string' && NAME.test(name)
}

export function encodeMessage (m: HolderRequest | HolderReply): Buffer {
  return Buffer.from(JSON.stringify(m))
}

/** A request as the holder reads it; a string saying what is wrong otherwise. */
export function decodeRequest (data: Buffer): HolderRequest | string {
  let m: unknown
  try { m = JSON.parse(data.toString('utf8')) } catch { return 'not JSON' }
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return 'not an object'
  const { op, name, code } = m as { op?: unknown, name?: unknown, code?: unknown }
  if (op === 'list' || op === 'ready' || op === 'standby') return { op }
  if (op === 'exiting') return Number.isInteger(code) ? { op, code: code as number } : `bad exit code ${JSON.stringify(code)}`
  if (op === 'put' || op === 'drop') return validFdName(name) ? { op, name } : `bad fd name ${JSON.stringify(name)}`
  return `unknown op ${JSON.stringify(op)}`
}

/** A reply as layerd reads it; a string saying what is wrong otherwise. */
export function decodeReply (data: Buffer): HolderReply | string {
  let m: unknown
  try { m = JSON.parse(data.toString('utf8')) } catch { return 'not JSON' }
  if (typeof m !== 'object' || m === null) return 'not an object'
  const r = m as { op?: unknown, name?: unknown, count?: unknown, message?: unknown }
  if (r.op === 'ok') return { op: 'ok' }
  if (r.op === 'fd' && validFdName(r.name)) return { op: 'fd', name: r.name }
  if (r.op === 'end' && typeof r.count === 'number') return { op: 'end', count: r.count }
  if (r.op === 'error' && typeof r.message === 'string') return { op: 'error', message: r.message }
  return `unexpected reply ${JSON.stringify(m).slice(0, 200)}`
}
