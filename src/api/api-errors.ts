/**
 * How a failure reaches an API client. The control plane answers in E2B's
 * shape (`{ code: <HTTP status>, message }`, which the SDK turns into
 * AuthenticationError, NotFoundError, RateLimitError, …); the envd services
 * answer with a Connect error code, whose HTTP status the Connect protocol
 * fixes. Both come from one mapping of layerd's error classes and errnos.
 *
 * May import: src/errors.ts.
 */
import { BadInputError, LayerdError, LimitExceededError, NotFoundError, UnsupportedError, UsageError, describeError } from '../errors.js'

/** A Connect error code (connectrpc.com/docs/protocol#error-codes) and the HTTP status it travels with. */
export type ConnectCode = 'invalid_argument' | 'unauthenticated' | 'permission_denied' | 'not_found' | 'already_exists' |
'resource_exhausted' | 'failed_precondition' | 'unimplemented' | 'internal' | 'unavailable' | 'deadline_exceeded'

export const CONNECT_STATUS: Readonly<Record<ConnectCode, number>> = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  already_exists: 409,
  resource_exhausted: 429,
  failed_precondition: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  deadline_exceeded: 504
}

export interface ApiFailure { code: ConnectCode, message: string }

const ERRNO_CODES: Readonly<Record<string, ConnectCode>> = {
  ENOENT: 'not_found',
  EEXIST: 'already_exists',
  ENOTEMPTY: 'failed_precondition',
  ENOTDIR: 'invalid_argument',
  EISDIR: 'invalid_argument',
  EINVAL: 'invalid_argument',
  ENAMETOOLONG: 'invalid_argument',
  // openat2 refuses a /proc magic link, or a symlink loop: the path is not one the sandbox may name.
  ELOOP: 'invalid_argument',
  EXDEV: 'invalid_argument',
  EACCES: 'permission_denied',
  EPERM: 'permission_denied',
  EROFS: 'permission_denied',
  ENOSPC: 'resource_exhausted',
  EDQUOT: 'resource_exhausted'
}

/** The client-facing code and one-line message of `err`. Sync, never throws. */
export function apiFailure (err: unknown): ApiFailure {
  const message = describeError(err)
  if (err instanceof NotFoundError) return { code: 'not_found', message }
  if (err instanceof BadInputError || err instanceof UsageError) return { code: 'invalid_argument', message }
  if (err instanceof LimitExceededError) return { code: 'resource_exhausted', message }
  if (err instanceof UnsupportedError) return { code: 'unimplemented', message }
  if (err instanceof LayerdError) return { code: 'internal', message }
  const errno = (err as NodeJS.ErrnoException | undefined)?.code
  if (typeof errno === 'string' && errno in ERRNO_CODES) return { code: ERRNO_CODES[errno]!, message }
  return { code: 'internal', message }
}
