/**
 * Errors shared by every layer of layerd.
 *
 * Every error thrown on purpose is a {@link LayerdError} with a stable string
 * `code`. Wrap lower-level failures with `{ cause }` instead of replacing them.
 * The CLI prints `message` as one line; the FUSE boundary maps `code` to errno.
 *
 * Imports nothing from the project.
 */

export class LayerdError extends Error {
  /** Stable, documented identifier; never reworded. */
  readonly code: string

  constructor (code: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

/** The named object, ref or path does not exist. */
export class NotFoundError extends LayerdError {
  static readonly code = 'ERR_NOT_FOUND'
  constructor (message: string, options?: { cause?: unknown }) { super(NotFoundError.code, message, options) }
}

/** The object store could not be reached or answered with a server error. Retrying may help. */
export class StoreUnavailableError extends LayerdError {
  static readonly code = 'ERR_STORE_UNAVAILABLE'
  constructor (message: string, options?: { cause?: unknown }) { super(StoreUnavailableError.code, message, options) }
}

/** Bytes read back do not match the digest they are addressed by, or do not decode. */
export class CorruptObjectError extends LayerdError {
  static readonly code = 'ERR_CORRUPT_OBJECT'
  constructor (message: string, options?: { cause?: unknown }) { super(CorruptObjectError.code, message, options) }
}

/** An input (image, tar, directory, manifest) is malformed or hostile. The message names the input. */
export class BadInputError extends LayerdError {
  static readonly code = 'ERR_BAD_INPUT'
  constructor (message: string, options?: { cause?: unknown }) { super(BadInputError.code, message, options) }
}

/** The command line or an API call was used wrongly. */
export class UsageError extends LayerdError {
  static readonly code = 'ERR_USAGE'
  constructor (message: string, options?: { cause?: unknown }) { super(UsageError.code, message, options) }
}

/** A configured limit (size, ratio, quota) was exceeded. */
export class LimitExceededError extends LayerdError {
  static readonly code = 'ERR_LIMIT'
  constructor (message: string, options?: { cause?: unknown }) { super(LimitExceededError.code, message, options) }
}

/** The layerd daemon is not running or does not answer. */
export class DaemonUnavailableError extends LayerdError {
  static readonly code = 'ERR_DAEMON_UNAVAILABLE'
  constructor (message: string, options?: { cause?: unknown }) { super(DaemonUnavailableError.code, message, options) }
}

/** A feature cannot work on this host (missing binary, kernel feature). Never faked. */
export class UnsupportedError extends LayerdError {
  static readonly code = 'ERR_UNSUPPORTED'
  constructor (message: string, options?: { cause?: unknown }) { super(UnsupportedError.code, message, options) }
}

/** The node's state database was written by a newer layerd (its schema version is above this build's). */
export class StateTooNewError extends LayerdError {
  static readonly code = 'ERR_STATE_TOO_NEW'
  constructor (message: string, options?: { cause?: unknown }) { super(StateTooNewError.code, message, options) }
}

/** The first line of an error's message, for one-line CLI output. */
export function describeError (err: unknown): string {
  if (err instanceof Error) return err.message.split('\n')[0] ?? String(err)
  return String(err)
}

/** A container registry could not be reached, or answered with an error (after the retries). The message names the registry and the object. */
export class RegistryError extends LayerdError {
  static readonly code = 'ERR_REGISTRY'
  constructor (message: string, options?: { cause?: unknown }) { super(RegistryError.code, message, options) }
}

/** A container registry refused the credentials, or wants credentials none were given for. */
export class RegistryAuthError extends LayerdError {
  static readonly code = 'ERR_REGISTRY_AUTH'
  constructor (message: string, options?: { cause?: unknown }) { super(RegistryAuthError.code, message, options) }
}
