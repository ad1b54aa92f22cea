/**
 * Every error code of layerd, in one place: one subclass of
 * {@link LayerdError} per stable string `code`, listed in ERROR_CLASSES
 * (README.md documents them next to the exit codes; a test keeps the two
 * in step).
 *
 * - Throw a subclass, never `new LayerdError(code, …)` or a plain Error for
 *   a failure a user can meet. A plain Error is a bug (InternalError wraps it).
 * - Wrap lower-level failures with `{ cause }` instead of replacing them;
 *   to add context to a LayerdError keep its class: withContext().
 *
 * The CLI prints `message` as one line; the FUSE boundary (src/fs/errno-boundary.ts)
 * maps classes to errno.
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

/** layerd is already running for this home (layerd exits 3). */
export class AlreadyRunningError extends LayerdError {
  static readonly code = 'ERR_ALREADY_RUNNING'
  constructor (message: string, options?: { cause?: unknown }) { super(AlreadyRunningError.code, message, options) }
}

/** The node-local chunk cache could not be opened, read or written (a local disk failure, not the store's). */
export class CacheIoError extends LayerdError {
  static readonly code = 'ERR_CACHE_IO'
  constructor (message: string, options?: { cause?: unknown }) { super(CacheIoError.code, message, options) }
}

/** A host tool layerd runs (mkfs.ext4, qemu-img, debugfs…) failed; the message has its command and stderr. */
export class CommandFailedError extends LayerdError {
  static readonly code = 'ERR_COMMAND_FAILED'
  constructor (message: string, options?: { cause?: unknown }) { super(CommandFailedError.code, message, options) }
}

/** `layerctl pull` fetched only part of an image: some chunks failed (named in the layerd log). */
export class PullIncompleteError extends LayerdError {
  static readonly code = 'ERR_PULL_INCOMPLETE'
  constructor (message: string, options?: { cause?: unknown }) { super(PullIncompleteError.code, message, options) }
}

/** The VM or its agent went away (crash, kill, power-off) while the host needed it. */
export class VmGoneError extends LayerdError {
  static readonly code = 'ERR_VM_GONE'
  constructor (message: string, options?: { cause?: unknown }) { super(VmGoneError.code, message, options) }
}

/** A control request the daemon could not take: its message names the method and the field. */
export class BadRequestError extends LayerdError {
  static readonly code = 'ERR_BAD_REQUEST'
  constructor (message: string, options?: { cause?: unknown }) { super(BadRequestError.code, message, options) }
}

/** A bug in layerd: a failure no code was made for. Its `cause` is the original error, stack included. */
export class InternalError extends LayerdError {
  static readonly code = 'ERR_INTERNAL'
  constructor (message: string, options?: { cause?: unknown }) { super(InternalError.code, message, options) }
}

/** The first line of an error's message, for one-line CLI output. */
export function describeError (err: unknown): string {
  if (err instanceof Error) return err.message.split('\n')[0] ?? String(err)
  return String(err)
}

/**
 * A store write lost a race it cannot win safely: its gc lease expired before
 * it could commit, or it needs an object a running gc is deleting. Nothing
 * was committed; rerunning the command is safe.
 */
export class ConflictError extends LayerdError {
  static readonly code = 'ERR_CONFLICT'
  constructor (message: string, options?: { cause?: unknown }) { super(ConflictError.code, message, options) }
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

/** The key or name is taken (the snapshotter; also a remote snapshot committed under the target name). */
export class AlreadyExistsError extends LayerdError {
  static readonly code = 'ERR_ALREADY_EXISTS'
  constructor (message: string, options?: { cause?: unknown }) { super(AlreadyExistsError.code, message, options) }
}

/** The snapshot is in the wrong state for the call (commit of a view, remove of a parent). */
export class FailedPreconditionError extends LayerdError {
  static readonly code = 'ERR_FAILED_PRECONDITION'
  constructor (message: string, options?: { cause?: unknown }) { super(FailedPreconditionError.code, message, options) }
}

/** A snapshotter request field is malformed (empty key, uncommitted parent, unknown update field). */
export class InvalidArgumentError extends LayerdError {
  static readonly code = 'ERR_INVALID_ARGUMENT'
  constructor (message: string, options?: { cause?: unknown }) { super(InvalidArgumentError.code, message, options) }
}

/** containerd answered a call with an error other than not-found, already-exists or unavailable. */
export class ContainerdError extends LayerdError {
  static readonly code = 'ERR_CONTAINERD'
  constructor (message: string, options?: { cause?: unknown }) { super(ContainerdError.code, message, options) }
}

/** `layerctl containerd pull`: a layer layerd's store does not hold, so it cannot be served lazily. */
export class NotRemoteError extends LayerdError {
  static readonly code = 'ERR_NOT_REMOTE'
  constructor (message: string, options?: { cause?: unknown }) { super(NotRemoteError.code, message, options) }
}

/** The FUSE fd holder or systemd cannot take a request (gone, or refused it). */
export class FdStoreError extends LayerdError {
  static readonly code = 'ERR_FD_STORE'
  constructor (message: string, options?: { cause?: unknown }) { super(FdStoreError.code, message, options) }
}

/** The FUSE fd holder (layerd/holder.ts) failed. */
export class HolderError extends LayerdError {
  static readonly code = 'ERR_HOLDER'
  constructor (message: string, options?: { cause?: unknown }) { super(HolderError.code, message, options) }
}

/** A LayerdError subclass: made from a message (and a cause). */
export type LayerdErrorClass = (new (message: string, options?: { cause?: unknown }) => LayerdError) & { readonly code: string }

/** Every code, with its class. Add a new subclass here too (src/errors.test.ts checks), and to README.md's list. */
export const ERROR_CLASSES: ReadonlyMap<string, LayerdErrorClass> = new Map(([
  NotFoundError, StoreUnavailableError, CorruptObjectError, BadInputError, UsageError, LimitExceededError,
  DaemonUnavailableError, UnsupportedError, StateTooNewError, AlreadyRunningError, CacheIoError,
  CommandFailedError, PullIncompleteError, VmGoneError, BadRequestError, RegistryError, RegistryAuthError,
  AlreadyExistsError, FailedPreconditionError, InvalidArgumentError, ContainerdError, NotRemoteError,
  FdStoreError, HolderError, ConflictError, InternalError
] as LayerdErrorClass[]).map(c => [c.code, c]))

/**
 * `err` with `context` in front of its message (`context: message`),
 * keeping its class and code, with `err` as its cause. A LayerdError whose
 * code has no class (from a newer daemon) keeps its code on a LayerdError.
 */
export function withContext (err: LayerdError, context: string): LayerdError {
  const message = `${context}: ${err.message}`
  const Cls = ERROR_CLASSES.get(err.code)
  return Cls === undefined ? new LayerdError(err.code, message, { cause: err }) : new Cls(message, { cause: err })
}

/**
 * `err` as a LayerdError: LayerdErrors pass through unchanged; anything
 * else is a bug, wrapped as InternalError (`context: its message`) with
 * `{ cause }`, so its stack is kept.
 */
export function asLayerdError (err: unknown, context: string): LayerdError {
  if (err instanceof LayerdError) return err
  return new InternalError(`${context}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
}

/**
 * The error a peer (the daemon, the fd holder) sent as `{ code, message }`,
 * as its class again; a code this build does not know (a newer peer) keeps
 * its code on a plain LayerdError.
 */
export function errorFromWire (code: string, message: string): LayerdError {
  const Cls = ERROR_CLASSES.get(code)
  return Cls === undefined ? new LayerdError(code, message) : new Cls(message)
}
