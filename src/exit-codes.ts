/**
 * The documented exit codes of layerd's processes, in one place: the daemon
 * sets them, the holder reads them to decide whether to restart it, the
 * entry points return them.
 *
 * May import: nothing.
 */

/**
 * `layerd`: 0 after a clean stop; 1 when a stop failed; 2 bad flags; 3
 * another daemon holds the home's lock; 4 the home or cache cannot be
 * opened; 5 a fatal internal error (an uncaught exception, logged with its
 * stack; src/daemon/control/process-guards.ts), after which a holder restarts it; 6
 * after a handover (SIGUSR2: the mounts are left to the next daemon).
 */
export const LAYERD_EXIT = { OK: 0, FAILURE: 1, USAGE: 2, ALREADY_RUNNING: 3, CANNOT_OPEN_HOME: 4, FATAL: 5, HANDOVER: 6 } as const

/**
 * `layerd-holder`: 0 when layerd stopped cleanly; layerd's own code when it
 * refused to start (2 bad flags, 3 another daemon holds the home); 2 on bad
 * flags; 3 when a holder already runs for that home; 1 otherwise.
 */
export const HOLDER_EXIT = { OK: 0, FAILURE: 1, USAGE: 2, ALREADY_RUNNING: 3 } as const
