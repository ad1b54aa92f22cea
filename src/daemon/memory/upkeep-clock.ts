/**
 * The time the memory upkeep runs on: a monotonic `now()` in milliseconds
 * and a repeating timer. Passed in so that tests drive the reclaimer's
 * timing (bursts, gaps, periodic settles) with a manual clock instead of
 * waiting on real time, which on a loaded machine made them slow and flaky.
 *
 * May import: nothing.
 */
export interface UpkeepClock {
  /** Monotonic milliseconds (performance.now() in production). */
  now: () => number
  /** Call `fn` every `ms` until stopped; never keeps the process alive. */
  every: (ms: number, fn: () => void) => { stop: () => void }
}

export const REAL_CLOCK: UpkeepClock = {
  now: () => performance.now(),
  every: (ms, fn) => {
    const timer = setInterval(fn, ms)
    timer.unref()
    return { stop: () => { clearInterval(timer) } }
  }
}
