/**
 * The snapshotter's errors, one per gRPC status containerd turns back into
 * its own errdefs (NotFoundError from src/errors.ts is the fourth). Stable
 * codes; messages name the snapshot key.
 *
 * May import: src/errors.ts.
 */
import { LayerdError } from '../errors.js'

/** The key or name is taken (also: a remote snapshot was committed under the target name). */
export class AlreadyExistsError extends LayerdError {
  static readonly code = 'ERR_ALREADY_EXISTS'
  constructor (message: string, options?: { cause?: unknown }) { super(AlreadyExistsError.code, message, options) }
}

/** The snapshot is in the wrong state for the call (commit of a view, remove of a parent). */
export class FailedPreconditionError extends LayerdError {
  static readonly code = 'ERR_FAILED_PRECONDITION'
  constructor (message: string, options?: { cause?: unknown }) { super(FailedPreconditionError.code, message, options) }
}

/** A request field is malformed (empty key, uncommitted parent, unknown update field). */
export class InvalidArgumentError extends LayerdError {
  static readonly code = 'ERR_INVALID_ARGUMENT'
  constructor (message: string, options?: { cause?: unknown }) { super(InvalidArgumentError.code, message, options) }
}
