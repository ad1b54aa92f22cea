/**
 * The snapshotter's errors, one per gRPC status containerd turns back into
 * its own errdefs (NotFoundError is the fourth). Defined with every other
 * code in src/errors.ts; named here for the snapshotter's modules.
 *
 * May import: src/errors.ts.
 */
export { AlreadyExistsError, FailedPreconditionError, InvalidArgumentError } from '../errors.js'
